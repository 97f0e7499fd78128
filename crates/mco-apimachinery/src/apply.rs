//! Server-side apply and field ownership (`metadata.managedFields`).
//!
//! Ownership is tracked per *manager identity*: the manager name, the
//! operation (`Apply` or `Update`), the subresource and, for `Update` only,
//! the API version, exactly as kube-apiserver keys them. Field sets are
//! stored in the upstream `FieldsV1` notation (`f:` fields, `k:` keyed list
//! items, `v:` set values, `i:` indices) so kubectl and kube-rs read them.
//!
//! # Status subresource
//!
//! Apply and update on `/status` use the same functions with
//! [`ApplyOptions::for_status`]: the entries get `subresource: status`, and
//! what the kind's status strategy resets ([`status_reset_fields`]: for a
//! custom resource `metadata` and `spec`) is ignored in the request (neither
//! merged nor owned). The caller
//! may pass the whole object or only `apiVersion`, `kind`, `metadata.name`
//! and `status`. On the main endpoint of a kind with a status subresource,
//! use [`ApplyOptions::with_reset_fields`]`(&["status"])` so that status in the
//! request is ignored there.
//!
//! # Example: the PATCH handler's flow
//!
//! ```
//! use mco_apimachinery::apply::{apply, record_update, ApplyError, ApplyOptions, CONFLICT_CAUSE_REASON};
//! use mco_apimachinery::patch::{merge_patch, MergeKeyTable};
//! use serde_json::json;
//!
//! let keys = MergeKeyTable::metadata_only();
//! let opts = ApplyOptions::new("2026-01-01T00:00:00Z", &keys);
//! let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                   "metadata": {"name": "demo"}, "data": {"a": "1"}});
//! // `application/apply-patch+yaml` creating the object (force=false).
//! let live = apply(None, &body, "kubectl", false, opts).unwrap();
//! // A merge patch by another manager, then its ownership bookkeeping.
//! let patched = merge_patch(&live, &json!({"data": {"a": "2"}})).unwrap();
//! let live = record_update(Some(&live), &patched, "kubectl-patch", opts);
//! // Re-applying the old value now conflicts: answer 409 with these causes.
//! match apply(Some(&live), &body, "kubectl", false, opts) {
//!     Err(ApplyError::Conflict(conflicts)) => {
//!         assert_eq!(conflicts[0].field, ".data.a");
//!         assert_eq!(CONFLICT_CAUSE_REASON, "FieldManagerConflict");
//!         assert_eq!(conflicts[0].message(), r#"conflict with "kubectl-patch" using v1"#);
//!     }
//!     other => panic!("expected a conflict, got {other:?}"),
//! }
//! ```

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde_json::{Map, Value};
use thiserror::Error;

use crate::patch::{ListType, MergeKeys, resolve_list_type};

mod by_diff;

/// A path in wire spelling: `["f:status", "f:conditions", "k:{\"type\":\"Ready\"}", "f:status"]`.
type Path = Vec<String>;

/// Fields whose ownership upstream never records: identity and bookkeeping.
const STRIPPED: &[&[&str]] = &[
    &["apiVersion"],
    &["kind"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "uid"],
    &["metadata", "resourceVersion"],
    &["metadata", "generation"],
    &["metadata", "creationTimestamp"],
    &["metadata", "managedFields"],
    &["metadata", "selfLink"],
    &["metadata", "clusterName"],
];

/// `details.causes[].reason` of a 409 apply conflict.
pub const CONFLICT_CAUSE_REASON: &str = "FieldManagerConflict";

/// Upstream caps field manager names at this length.
pub const MAX_MANAGER_LEN: usize = 128;

/// The manager name upstream uses when a non-apply request has no
/// `fieldManager`: the User-Agent up to its first `/` (`kubectl/v1.32.5 ...`
/// gives `kubectl`), truncated to [`MAX_MANAGER_LEN`].
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or_default();
    prefix.chars().take(MAX_MANAGER_LEN).collect()
}

/// The manager upstream invents for fields that existed before anyone applied.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// How a managed fields entry was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `metadata.managedFields` entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    fields: BTreeSet<Path>,
}

impl ManagedEntry {
    /// The owned fields in upstream path notation (`.spec.paused`,
    /// `.status.conditions[type="Ready"].status`), sorted.
    pub fn paths(&self) -> Vec<String> {
        self.fields.iter().map(|p| display_path(p)).collect()
    }

    /// Whether the entry owns the field at upstream path `path` exactly.
    pub fn owns(&self, path: &str) -> bool {
        self.paths().iter().any(|p| p == path)
    }

    fn same_identity(&self, manager: &str, op: Operation, api: &str, sub: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == op
            && self.subresource.as_deref() == sub
            && (op == Operation::Apply || self.api_version == api)
    }

    /// Upstream's human spelling of a manager identity, used in conflicts.
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    fn order(&self) -> EntryOrder<'_> {
        entry_order(
            self.operation,
            self.time.as_deref(),
            &self.manager,
            &self.api_version,
            self.subresource.as_deref(),
        )
    }

    fn head(&self) -> EntryHead {
        EntryHead {
            manager: self.manager.clone(),
            operation: self.operation,
            api_version: self.api_version.clone(),
            time: self.time.clone(),
            subresource: self.subresource.clone(),
        }
    }

    fn to_json(&self) -> Value {
        let fields = match to_fields_v1(&self.fields) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        self.head().to_json(fields)
    }

    fn from_json(v: &Value) -> Option<Self> {
        let h = EntryHead::of(v)?;
        Some(Self {
            manager: h.manager,
            operation: h.operation,
            api_version: h.api_version,
            time: h.time,
            subresource: h.subresource,
            fields: from_fields_v1(v.get("fieldsV1").unwrap_or(&Value::Null)),
        })
    }
}

/// A managedFields entry without its field set: identity and time, what matching and sorting
/// need.
struct EntryHead {
    manager: String,
    operation: Operation,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
}

impl EntryHead {
    /// `None` for an operation other than `Apply` or `Update`: the entry is dropped.
    fn of(v: &Value) -> Option<Self> {
        let operation = match v.get("operation")?.as_str()? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(EntryHead {
            manager: s("manager").unwrap_or_default(),
            operation,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|s| !s.is_empty()),
        })
    }

    /// The entry around an encoded field set, keys in the order kube-apiserver writes them.
    fn to_json(&self, fields: Map<String, Value>) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), Value::from(self.manager.as_str()));
        m.insert("operation".into(), Value::from(self.operation.as_str()));
        m.insert("apiVersion".into(), Value::from(self.api_version.as_str()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::from(t.as_str()));
        }
        m.insert("fieldsType".into(), Value::from("FieldsV1"));
        m.insert("fieldsV1".into(), Value::Object(fields));
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), Value::from(s.as_str()));
        }
        Value::Object(m)
    }

    fn order(&self) -> EntryOrder<'_> {
        entry_order(
            self.operation,
            self.time.as_deref(),
            &self.manager,
            &self.api_version,
            self.subresource.as_deref(),
        )
    }
}

/// How upstream sorts managedFields entries: operation, time, manager, API version, subresource.
type EntryOrder<'a> = (
    Operation,
    Option<(i64, String)>,
    &'a str,
    &'a str,
    Option<&'a str>,
);

fn entry_order<'a>(
    operation: Operation,
    time: Option<&str>,
    manager: &'a str,
    api_version: &'a str,
    subresource: Option<&'a str>,
) -> EntryOrder<'a> {
    (
        operation,
        time.map(time_key),
        manager,
        api_version,
        subresource,
    )
}

/// Decodes `metadata.managedFields`; malformed entries are skipped, as
/// upstream resets what it cannot decode.
pub fn managed_entries(obj: &Value) -> Vec<ManagedEntry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|es| es.iter().filter_map(ManagedEntry::from_json).collect())
        .unwrap_or_default()
}

/// One field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owning manager's upstream spelling, e.g. `"kubectl-client-side-apply" using v1`.
    pub manager: String,
    /// The field in upstream notation, e.g. `.spec.paused`.
    pub field: String,
    path: Path,
    sort_key: (String, Operation, String, Option<String>),
}

impl Conflict {
    /// The `details.causes[].message` upstream sends (`reason: FieldManagerConflict`).
    pub fn message(&self) -> String {
        format!("conflict with {}", self.manager)
    }
}

/// Server-side apply failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change (HTTP 409, reason
    /// `Conflict`). Display gives kube-apiserver's exact message; each
    /// conflict is one `details.causes` entry with reason
    /// [`CONFLICT_CAUSE_REASON`], `field` and [`Conflict::message`].
    #[error("{}", conflict_message(.0))]
    Conflict(Vec<Conflict>),
    /// The applied configuration is malformed (HTTP 422 upstream).
    #[error("{0}")]
    Invalid(String),
}

fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.manager, c.field
        );
    }
    let mut sorted: Vec<&Conflict> = conflicts.iter().collect();
    sorted.sort_by(|a, b| a.sort_key.cmp(&b.sort_key));
    let mut lines = Vec::new();
    let mut current: Option<&(String, Operation, String, Option<String>)> = None;
    for c in sorted {
        if current != Some(&c.sort_key) {
            lines.push(format!("conflicts with {}:", c.manager));
            current = Some(&c.sort_key);
        }
        lines.push(format!("- {}", c.field));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// What the caller knows about the request besides the bodies.
#[derive(Clone, Copy)]
pub struct ApplyOptions<'a> {
    /// RFC 3339 time stamped on the acting manager's entry.
    pub time: &'a str,
    /// List semantics (`x-kubernetes-list-type`) by field path.
    pub list_types: &'a dyn MergeKeys,
    /// Overrides the entry's `apiVersion`; defaults to the body's.
    pub api_version: Option<&'a str>,
    /// `Some("status")` for writes through `/status`.
    pub subresource: Option<&'a str>,
    /// Top-level dotted paths the endpoint ignores (`status` on the main
    /// endpoint, `spec` on `/status`).
    pub reset_fields: &'a [&'a str],
}

impl<'a> ApplyOptions<'a> {
    pub fn new(time: &'a str, list_types: &'a dyn MergeKeys) -> Self {
        Self {
            time,
            list_types,
            api_version: None,
            subresource: None,
            reset_fields: &[],
        }
    }

    /// Options for a custom resource's `/status` subresource: entries get
    /// `subresource: status`, and the request owns nothing outside `status`
    /// ([`status_reset_fields`]; a built-in kind's are set with
    /// [`Self::with_reset_fields`]).
    pub fn for_status(time: &'a str, list_types: &'a dyn MergeKeys) -> Self {
        Self {
            subresource: Some("status"),
            reset_fields: status_reset_fields("", "", true),
            ..Self::new(time, list_types)
        }
    }

    pub fn with_api_version(mut self, api_version: &'a str) -> Self {
        self.api_version = Some(api_version);
        self
    }

    pub fn with_subresource(mut self, subresource: &'a str) -> Self {
        self.subresource = Some(subresource);
        self
    }

    pub fn with_reset_fields(mut self, fields: &'a [&'a str]) -> Self {
        self.reset_fields = fields;
        self
    }

    fn api_version_for(&self, obj: &Value) -> String {
        self.api_version
            .map(str::to_string)
            .or_else(|| {
                obj.get("apiVersion")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default()
    }
}

/// What a write through `/status` neither changes nor owns, as each kind's status strategy in
/// kube-apiserver resets it (`GetResetFields`, which its field manager leaves out of every
/// field set the write takes): a custom resource's `metadata` and `spec`, a Pod's `spec`,
/// deletion timestamp and owner references, a Deployment's `spec` and labels, and any other
/// kind's `spec`.
pub fn status_reset_fields(group: &str, kind: &str, custom: bool) -> &'static [&'static str] {
    match (group, kind) {
        _ if custom => &["metadata", "spec"],
        ("", "Pod") => &[
            "spec",
            "metadata.deletionTimestamp",
            "metadata.ownerReferences",
        ],
        ("apps", "Deployment") => &["spec", "metadata.labels"],
        _ => &["spec"],
    }
}

impl fmt::Debug for ApplyOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApplyOptions")
            .field("time", &self.time)
            .field("api_version", &self.api_version)
            .field("subresource", &self.subresource)
            .field("reset_fields", &self.reset_fields)
            .finish_non_exhaustive()
    }
}

/// Server-side apply of `applied` (the body of an `apply-patch+yaml`
/// request, already decoded) by `manager` onto `live` (`None` creates).
///
/// Returns the new object with `metadata.managedFields` updated. Fields the
/// manager applied before but omits now are removed unless another manager
/// owns them. Fields another manager owns with a different value conflict
/// unless `force`, in which case ownership moves to `manager`. Server-owned
/// metadata (uid, resourceVersion, ...) is the caller's business.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    opts: ApplyOptions<'_>,
) -> Result<Value, ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "apply configuration must be an object".into(),
        ));
    }
    for field in ["apiVersion", "kind"] {
        if applied
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApplyError::Invalid(format!(
                "{field} must be set in an apply configuration"
            )));
        }
    }
    let lt = opts.list_types;
    let mut config = applied.clone();
    if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    for f in opts.reset_fields {
        remove_dotted(&mut config, f);
    }
    let config_set = owned_set(&config, lt, opts.reset_fields, true)?;
    let api_version = opts.api_version_for(applied);

    let empty = Value::Object(Map::new());
    let live_v = live.unwrap_or(&empty);
    let mut entries = managed_entries(live_v);
    if live.is_some() && entries.is_empty() {
        // Upstream gives pre-existing fields to a synthetic updater so that the
        // first apply cannot silently take them over.
        let fields = owned_set(live_v, lt, opts.reset_fields, false)?;
        if !fields.is_empty() {
            entries.push(ManagedEntry {
                manager: BEFORE_FIRST_APPLY.into(),
                operation: Operation::Update,
                api_version: opts.api_version_for(live_v),
                time: None,
                subresource: None,
                fields,
            });
        }
    }

    let mut merged = merge_values(Some(live_v), &config, &mut Vec::new(), lt);
    if let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }

    let is_self = |e: &ManagedEntry| {
        e.same_identity(manager, Operation::Apply, &api_version, opts.subresource)
    };
    let mut conflicts = Vec::new();
    for e in entries.iter().filter(|e| !is_self(e)) {
        for p in &e.fields {
            if changed_for_apply(live_v, &merged, p, lt) {
                conflicts.push(Conflict {
                    manager: e.describe(),
                    field: display_path(p),
                    path: p.clone(),
                    sort_key: (
                        e.manager.clone(),
                        e.operation,
                        e.api_version.clone(),
                        e.subresource.clone(),
                    ),
                });
            }
        }
    }
    if !conflicts.is_empty() && !force && manager == KUBECTL_MANAGER {
        // kubectl's server-side apply takes over, without a conflict, the fields its
        // client-side apply set and that still hold the value last applied.
        if let Some(allowed) = allowed_by_last_applied(live_v, &api_version, lt) {
            conflicts.retain(|c| !allowed.contains(&c.path));
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(ApplyError::Conflict(conflicts));
    }
    for e in entries.iter_mut().filter(|e| !is_self(e)) {
        let snapshot = e.fields.clone();
        for p in snapshot {
            if changed_for_apply(live_v, &merged, &p, lt) {
                e.fields.remove(&p);
            }
        }
    }

    let last_set = entries
        .iter()
        .find(|e| is_self(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    entries.retain(|e| !is_self(e));
    entries.push(ManagedEntry {
        manager: manager.to_string(),
        operation: Operation::Apply,
        api_version,
        time: Some(opts.time.to_string()),
        subresource: opts.subresource.map(str::to_string),
        fields: config_set,
    });

    // Prune what this manager stopped applying, unless someone still owns it
    // (or something beneath it).
    let mut doomed: Vec<&Path> = last_set
        .iter()
        .filter(|p| !entries.iter().any(|e| owns_at_or_below(&e.fields, p)))
        .collect();
    doomed.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in doomed {
        remove_path(&mut merged, p);
    }

    if manager == KUBECTL_MANAGER {
        refresh_last_applied(&mut merged, applied);
    }
    finish(merged, entries)
}

/// The field manager of `kubectl apply --server-side`, the one manager whose applies
/// kube-apiserver reconciles with the client-side `last-applied-configuration` annotation.
pub const KUBECTL_MANAGER: &str = "kubectl";

/// The annotation `kubectl apply` (client-side) records the applied configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields of `live`'s last-applied configuration whose value `live` still holds: a
/// client-side apply set them, so kubectl's server-side apply may take them over. `None`
/// without an annotation, or with one that does not parse or names another version.
fn allowed_by_last_applied(
    live: &Value,
    api_version: &str,
    lt: &dyn MergeKeys,
) -> Option<BTreeSet<Path>> {
    let text = live
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED_ANNOTATION)?
        .as_str()
        .filter(|t| !t.is_empty())?;
    let last: Value = serde_json::from_str(text).ok()?;
    if last.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let mut set = owned_set(&last, lt, &[], false).ok()?;
    set.retain(|p| !changed(&last, live, p, lt));
    Some(set)
}

/// Keeps a client-side last-applied annotation, where the object has one, equal to what
/// kubectl applied server-side (without the annotation itself), encoded as kube-apiserver
/// encodes an unstructured object: compact JSON, keys sorted, HTML escaped, newline-ended.
fn refresh_last_applied(obj: &mut Value, applied: &Value) {
    let Some(Value::String(current)) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(|a| a.get_mut(LAST_APPLIED_ANNOTATION))
    else {
        return;
    };
    if current.is_empty() {
        return;
    }
    let mut config = applied.clone();
    if let Some(a) = config
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED_ANNOTATION);
    }
    *current = go_json(&sorted_keys(config));
}

/// `v` as Go's `json.Encoder` writes it: HTML characters escaped, a newline at the end.
fn go_json(v: &Value) -> String {
    let mut out = String::new();
    for c in v.to_string().chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

/// `v` with every object's keys in byte order, as Go encodes a map.
fn sorted_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut pairs: Vec<(String, Value)> = m.into_iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k, sorted_keys(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted_keys).collect()),
        other => other,
    }
}

/// Records a non-apply write (create, update, any patch) by `manager` as an
/// `Update` entry: fields it added or changed become its own and leave other
/// managers, and fields it removed leave everyone. A later apply that
/// disagrees with those fields then conflicts, as upstream.
///
/// `after` is the object about to be stored; if it carries
/// `metadata.managedFields` (a client may send them on update) those are the
/// starting point, otherwise `before`'s are.
pub fn record_update(
    before: Option<&Value>,
    after: &Value,
    manager: &str,
    opts: ApplyOptions<'_>,
) -> Value {
    record_update_owned(before, after.clone(), manager, opts)
}

/// [`record_update`] taking the object by value: a server's write path owns it already, and
/// copying every written object was a measurable part of its cost.
pub fn record_update_owned(
    before: Option<&Value>,
    mut obj: Value,
    manager: &str,
    opts: ApplyOptions<'_>,
) -> Value {
    if let Some(b) = before
        && obj.is_object()
    {
        #[cfg(debug_assertions)]
        let sent = obj.clone();
        match by_diff::record_update(b, obj, manager, opts) {
            Ok(out) => {
                #[cfg(debug_assertions)]
                {
                    let general = record_update_general(before, sent, manager, opts);
                    assert_eq!(
                        serde_json::to_string(&out).ok(),
                        serde_json::to_string(&general).ok(),
                        "record_update by diff departs from the general path"
                    );
                }
                return out;
            }
            Err(o) => obj = o,
        }
    }
    record_update_general(before, obj, manager, opts)
}

/// [`record_update_owned`] for any request: every field set decoded, the whole object walked.
fn record_update_general(
    before: Option<&Value>,
    mut obj: Value,
    manager: &str,
    opts: ApplyOptions<'_>,
) -> Value {
    if !obj.is_object() {
        return obj;
    }
    let lt = opts.list_types;
    let empty = Value::Object(Map::new());
    let before_v = before.unwrap_or(&empty);
    let mut entries = match obj.pointer("/metadata/managedFields") {
        Some(_) => managed_entries(&obj),
        None => managed_entries(before_v),
    };
    let api_version = opts.api_version_for(&obj);
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    // Ownership walks never fail for stored objects: duplicates are tolerated.
    let new = owned_set(&obj, lt, opts.reset_fields, false).unwrap_or_default();
    let typed = typed_before(before_v, &obj, lt);
    let before_t = typed.as_ref().unwrap_or(before_v);
    let mut same = SameFields::new(before_t, &obj);
    let mut touched: BTreeSet<Path> = new
        .iter()
        .filter(|p| !same.covers(p) && changed(before_t, &obj, p, lt))
        .cloned()
        .collect();
    added_containers(
        Some(before_t),
        &obj,
        &mut Vec::new(),
        &mut Vec::new(),
        lt,
        &mut touched,
    );
    let excluded = excluded_paths(opts.reset_fields);
    touched.retain(|p| !is_excluded(p, &excluded));
    let is_self = |e: &ManagedEntry| {
        e.same_identity(manager, Operation::Update, &api_version, opts.subresource)
    };
    for e in entries.iter_mut().filter(|e| !is_self(e)) {
        e.fields.retain(|p| !touched.contains(p));
    }
    let mut mine = entries
        .iter()
        .find(|e| is_self(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    mine.extend(touched);
    entries.retain(|e| !is_self(e));
    entries.push(ManagedEntry {
        manager: manager.to_string(),
        operation: Operation::Update,
        api_version,
        time: Some(opts.time.to_string()),
        subresource: opts.subresource.map(str::to_string),
        fields: mine,
    });
    match finish_with(obj, entries, Some(&new)) {
        Ok(v) => v,
        Err(_) => unreachable!("finish fails only for a non-object, checked above"),
    }
}

/// Drops ownership of vanished fields and empty entries, sorts entries as
/// upstream does, and stores them in the object.
fn finish(obj: Value, entries: Vec<ManagedEntry>) -> Result<Value, ApplyError> {
    finish_with(obj, entries, None)
}

/// [`finish`], told the object's leaf and item paths when the caller has them: a path among
/// them is present without walking the object (intermediate fields are still looked up).
fn finish_with(
    mut obj: Value,
    mut entries: Vec<ManagedEntry>,
    present: Option<&BTreeSet<Path>>,
) -> Result<Value, ApplyError> {
    for e in &mut entries {
        e.fields
            .retain(|p| present.is_some_and(|s| s.contains(p)) || lookup(&obj, p).is_some());
    }
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| a.order().cmp(&b.order()));
    let Some(root) = obj.as_object_mut() else {
        return Err(ApplyError::Invalid("object must be a JSON object".into()));
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert(
                "managedFields".into(),
                Value::Array(entries.iter().map(ManagedEntry::to_json).collect()),
            );
        }
    }
    Ok(obj)
}

/// Orders RFC 3339 times chronologically when they parse, lexically otherwise.
fn time_key(t: &str) -> (i64, String) {
    match t.parse::<jiff::Timestamp>() {
        Ok(ts) => (ts.as_second(), String::new()),
        Err(_) => (i64::MAX, t.to_string()),
    }
}

fn owns_at_or_below(set: &BTreeSet<Path>, p: &Path) -> bool {
    set.range(p.clone()..)
        .next()
        .is_some_and(|q| q.starts_with(p))
}

fn remove_dotted(v: &mut Value, dotted: &str) {
    let segs: Vec<&str> = dotted.split('.').collect();
    let Some((last, parents)) = segs.split_last() else {
        return;
    };
    let mut cur = v;
    for s in parents {
        match cur.get_mut(*s) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.shift_remove(*last);
    }
}

// ---------------------------------------------------------------------------
// Field sets
// ---------------------------------------------------------------------------

/// The fields `obj` sets, minus identity and reset fields. With `strict`,
/// keyed lists must have their keys and no duplicates (apply bodies);
/// stored objects are walked leniently.
fn owned_set(
    obj: &Value,
    lt: &dyn MergeKeys,
    reset: &[&str],
    strict: bool,
) -> Result<BTreeSet<Path>, ApplyError> {
    let mut out = BTreeSet::new();
    walk_set(obj, &mut Vec::new(), &mut Vec::new(), lt, strict, &mut out)?;
    let excluded = excluded_paths(reset);
    out.retain(|p| !excluded.iter().any(|x| p.starts_with(x)));
    Ok(out)
}

/// The paths nobody owns: identity, bookkeeping and the endpoint's reset fields.
fn excluded_paths(reset: &[&str]) -> Vec<Path> {
    STRIPPED
        .iter()
        .map(|p| p.iter().map(|s| format!("f:{s}")).collect())
        .chain(
            reset
                .iter()
                .map(|d| d.split('.').map(|s| format!("f:{s}")).collect()),
        )
        .collect()
}

/// Whether nobody owns `p`: it lies under an excluded path, or it is `metadata` itself,
/// which kube-apiserver strips from every field set (its fields are owned one by one).
fn is_excluded(p: &Path, excluded: &[Path]) -> bool {
    (p.len() == 1 && p[0] == "f:metadata") || excluded.iter().any(|x| p.starts_with(x))
}

/// `before` as kube-apiserver's typed form of it has it, when that differs from its JSON:
/// the objects [`MergeKeys::always_present`] names are there, empty, wherever `after` has
/// them and their parent is there. `None` when nothing is missing.
fn typed_before(before: &Value, after: &Value, lt: &dyn MergeKeys) -> Option<Value> {
    fn missing(
        before: Option<&Value>,
        after: &Value,
        names: &mut Vec<String>,
        lt: &dyn MergeKeys,
        out: &mut Vec<Vec<String>>,
    ) {
        let Some(m) = after.as_object() else {
            return;
        };
        for (k, child) in m {
            if !child.is_object() {
                continue;
            }
            names.push(k.clone());
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            if lt.always_present(&refs) {
                let old = before.and_then(|b| b.get(k));
                if old.is_none() {
                    out.push(names.clone());
                }
                if old.is_none_or(Value::is_object) {
                    missing(old, child, names, lt, out);
                }
            }
            names.pop();
        }
    }
    if !before.is_object() {
        return None;
    }
    let mut paths = Vec::new();
    missing(Some(before), after, &mut Vec::new(), lt, &mut paths);
    if paths.is_empty() {
        return None;
    }
    let mut typed = before.clone();
    // Parents come before their children: each insertion finds its parent.
    for p in paths {
        let Some((last, parents)) = p.split_last() else {
            continue;
        };
        let parent = parents
            .iter()
            .try_fold(&mut typed, |cur, name| cur.get_mut(name.as_str()));
        if let Some(m) = parent.and_then(Value::as_object_mut) {
            m.entry(last.clone())
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    Some(typed)
}

/// The maps, lists and list items `after` has where `before` has no such container: the
/// write added them, so it owns them itself (a `.` in `fieldsV1`), as structured-merge-diff's
/// comparison marks every added node. Only parts that differ are walked.
fn added_containers(
    before: Option<&Value>,
    after: &Value,
    wire: &mut Path,
    names: &mut Vec<String>,
    lt: &dyn MergeKeys,
    out: &mut BTreeSet<Path>,
) {
    match after {
        // An atomic object is a leaf: owned through the comparison of values.
        Value::Object(_) if is_atomic(lt, names) => {}
        Value::Object(m) if !m.is_empty() || wire.is_empty() => {
            if !wire.is_empty() && !before.is_some_and(Value::is_object) {
                out.insert(wire.clone());
            }
            let b = before.and_then(Value::as_object);
            for (k, child) in m {
                let old = b.and_then(|b| b.get(k));
                if crate::value::equal_opt(old, Some(child)) {
                    continue;
                }
                wire.push(format!("f:{k}"));
                names.push(k.clone());
                added_containers(old, child, wire, names, lt, out);
                names.pop();
                wire.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let keys = match resolve_list_type(lt, &name_refs) {
                ListType::Atomic => return,
                ListType::Set => None,
                ListType::Map(keys) => Some(keys),
            };
            if !before.is_some_and(Value::is_array) {
                out.insert(wire.clone());
            }
            let Some(keys) = keys else {
                return;
            };
            let b = before.and_then(Value::as_array);
            for item in items {
                let Some(fields) = item_key_fields(item, &keys) else {
                    continue;
                };
                let old = b.and_then(|b| b.iter().find(|i| key_matches(i, &fields)));
                if crate::value::equal_opt(old, Some(item)) {
                    continue;
                }
                wire.push(format!("k:{}", Value::Object(fields)));
                added_containers(old, item, wire, names, lt, out);
                wire.pop();
            }
        }
        _ => {}
    }
}

fn walk_set(
    v: &Value,
    wire: &mut Path,
    names: &mut Vec<String>,
    lt: &dyn MergeKeys,
    strict: bool,
    out: &mut BTreeSet<Path>,
) -> Result<(), ApplyError> {
    match v {
        // An atomic object is owned whole, as a leaf is.
        Value::Object(_) if is_atomic(lt, names) => {
            out.insert(wire.clone());
        }
        Value::Object(m) if !m.is_empty() || wire.is_empty() => {
            for (k, child) in m {
                // A map entry is owned itself, not only through its leaves.
                let free = (child.is_object() || child.is_array()) && {
                    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
                    lt.free_key(&name_refs, k)
                };
                wire.push(format!("f:{k}"));
                if free {
                    out.insert(wire.clone());
                }
                names.push(k.clone());
                walk_set(child, wire, names, lt, strict, out)?;
                names.pop();
                wire.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
            match resolve_list_type(lt, &name_refs) {
                ListType::Atomic => {
                    out.insert(wire.clone());
                }
                ListType::Set => {
                    for item in items {
                        let mut p = wire.clone();
                        p.push(format!("v:{item}"));
                        if strict && out.contains(&p) {
                            return Err(ApplyError::Invalid(format!(
                                "{}: duplicate entries for key [={item}]",
                                display_path(wire)
                            )));
                        }
                        out.insert(p);
                    }
                }
                ListType::Map(keys) => {
                    for (i, item) in items.iter().enumerate() {
                        let Some(key) = item_key(item, &keys) else {
                            if strict {
                                return Err(ApplyError::Invalid(format!(
                                    "{}: element {i}: associative list with keys has an element that omits key field {:?}",
                                    display_path(wire),
                                    keys.iter()
                                        .find(|k| item.get(k.as_str()).is_none())
                                        .map_or("", String::as_str)
                                )));
                            }
                            out.insert(wire.clone());
                            continue;
                        };
                        wire.push(key);
                        if strict && out.contains(&*wire) {
                            let e = format!(
                                "{}: duplicate entries for key {}",
                                display_path(&wire[..wire.len() - 1]),
                                display_path(&wire[wire.len() - 1..])
                            );
                            return Err(ApplyError::Invalid(e));
                        }
                        out.insert(wire.clone());
                        walk_set(item, wire, names, lt, strict, out)?;
                        wire.pop();
                    }
                }
            }
        }
        _ => {
            out.insert(wire.clone());
        }
    }
    Ok(())
}

/// `k:{...}` for a keyed list item: the key fields it has, sorted by name.
fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    item_key_fields(item, keys).map(|m| format!("k:{}", Value::Object(m)))
}

/// The key fields of a keyed list item, sorted by name, as `k:` spells them.
fn item_key_fields(item: &Value, keys: &[String]) -> Option<Map<String, Value>> {
    let obj = item.as_object()?;
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    let mut m = Map::new();
    for k in sorted {
        if let Some(v) = obj.get(k.as_str()) {
            m.insert(k.clone(), v.clone());
        }
    }
    // The first key is mandatory; later ones may be defaulted (protocol).
    obj.get(keys.first()?.as_str())?;
    Some(m)
}

enum Elem {
    Field(String),
    Key(Map<String, Value>),
    Val(Value),
    Index(usize),
}

fn parse_elem(s: &str) -> Option<Elem> {
    let (kind, rest) = s.split_at_checked(2)?;
    match kind {
        "f:" => Some(Elem::Field(rest.to_string())),
        "k:" => match serde_json::from_str(rest).ok()? {
            Value::Object(m) => Some(Elem::Key(m)),
            _ => None,
        },
        "v:" => serde_json::from_str(rest).ok().map(Elem::Val),
        "i:" => rest.parse().ok().map(Elem::Index),
        _ => None,
    }
}

fn key_matches(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| item.get(k) == Some(v))
}

fn lookup<'v>(root: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = root;
    for e in path {
        // Fields are most elements: no parse, no allocation.
        if let Some(name) = e.strip_prefix("f:") {
            cur = cur.as_object()?.get(name)?;
            continue;
        }
        cur = match parse_elem(e)? {
            Elem::Field(n) => cur.as_object()?.get(&n)?,
            Elem::Key(k) => cur.as_array()?.iter().find(|i| key_matches(i, &k))?,
            Elem::Val(x) => cur.as_array()?.iter().find(|i| **i == x)?,
            Elem::Index(i) => cur.as_array()?.get(i)?,
        };
    }
    Some(cur)
}

/// Whether the field at `p` differs. List items and maps compare by
/// presence: their contents are separate fields with their own owners.
/// Which fields and list items, up to three levels down, are equal before and after a write.
/// Every path under such a value is unchanged, so it skips [`changed`]'s two lookups from the
/// root: a write usually touches one corner of the object (an annotation, one condition of a
/// status), and an object has hundreds of leaf paths. Keyed items count: a status write that
/// moves one of fourteen conditions looks up each condition once, not each of its fields twice
/// (a `k:` element is parsed on every lookup).
struct SameFields<'v, 'p> {
    a: &'v Value,
    b: &'v Value,
    memo: HashMap<&'p [String], bool>,
}

/// How deep [`SameFields`] compares: `.status.conditions[type=X]` is three elements.
const SAME_DEPTH: usize = 3;

impl<'v, 'p> SameFields<'v, 'p> {
    fn new(a: &'v Value, b: &'v Value) -> Self {
        SameFields {
            a,
            b,
            memo: HashMap::new(),
        }
    }

    /// Whether `p` lies under a field or item whose value did not change.
    fn covers(&mut self, p: &'p Path) -> bool {
        let (a, b) = (self.a, self.b);
        // Proper prefixes only: the path's own value is `changed`'s to judge.
        for d in 1..p.len().min(SAME_DEPTH + 1) {
            let prefix = &p[..d];
            let same = *self
                .memo
                .entry(prefix)
                .or_insert_with(|| lookup(a, prefix) == lookup(b, prefix));
            if same {
                return true;
            }
        }
        false
    }
}

fn changed(a: &Value, b: &Value, p: &Path, lt: &dyn MergeKeys) -> bool {
    match (lookup(a, p), lookup(b, p)) {
        (None, None) => false,
        (Some(_), None) | (None, Some(_)) => true,
        (Some(x), Some(y)) => {
            let by_presence = p
                .last()
                .is_some_and(|e| e.starts_with("k:") || e.starts_with("v:"));
            if x == y {
                return false;
            }
            // An atomic object (or keyed item) is one value, compared whole.
            if (by_presence || (x.is_object() && y.is_object())) && x.is_object() {
                let names: Vec<String> = p
                    .iter()
                    .filter_map(|e| e.strip_prefix("f:"))
                    .map(str::to_string)
                    .collect();
                return lt.atomic(&names);
            }
            !by_presence
        }
    }
}

/// Whether the object at `names` (field names from the root, list positions left out) is
/// atomic; the root never is.
fn is_atomic(lt: &dyn MergeKeys, names: &[String]) -> bool {
    !names.is_empty() && lt.atomic(names)
}

/// [`changed`] for an apply's conflicts: a list merged by items or as a set, there before and
/// after, is unchanged itself (an owner of the list as a whole, a `.` in its `fieldsV1`, is
/// not in conflict when items change), as only an atomic list is one value.
fn changed_for_apply(a: &Value, b: &Value, p: &Path, lt: &dyn MergeKeys) -> bool {
    if let (Some(Value::Array(_)), Some(Value::Array(_))) = (lookup(a, p), lookup(b, p)) {
        let names: Vec<&str> = p.iter().filter_map(|e| e.strip_prefix("f:")).collect();
        if resolve_list_type(lt, &names) != ListType::Atomic {
            return false;
        }
    }
    changed(a, b, p, lt)
}

fn remove_path(root: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    // Key fields of a surviving list item are never removed on their own.
    if let (Some(Elem::Field(f)), Some(Some(Elem::Key(k)))) =
        (parse_elem(last), parents.last().map(|p| parse_elem(p)))
        && k.contains_key(&f)
    {
        return;
    }
    let Some(parent) = lookup_mut(root, parents) else {
        return;
    };
    match parse_elem(last) {
        Some(Elem::Field(f)) => {
            if let Some(m) = parent.as_object_mut() {
                m.shift_remove(&f);
            }
        }
        Some(Elem::Key(k)) => {
            if let Some(items) = parent.as_array_mut()
                && let Some(i) = items.iter().position(|i| key_matches(i, &k))
            {
                items.remove(i);
            }
        }
        Some(Elem::Val(x)) => {
            if let Some(items) = parent.as_array_mut() {
                items.retain(|i| *i != x);
            }
        }
        Some(Elem::Index(i)) => {
            if let Some(items) = parent.as_array_mut()
                && i < items.len()
            {
                items.remove(i);
            }
        }
        None => {}
    }
}

fn lookup_mut<'v>(root: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    let mut cur = root;
    for e in path {
        if let Some(name) = e.strip_prefix("f:") {
            cur = cur.as_object_mut()?.get_mut(name)?;
            continue;
        }
        cur = match parse_elem(e)? {
            Elem::Field(n) => cur.as_object_mut()?.get_mut(&n)?,
            Elem::Key(k) => cur
                .as_array_mut()?
                .iter_mut()
                .find(|i| key_matches(i, &k))?,
            Elem::Val(x) => cur.as_array_mut()?.iter_mut().find(|i| **i == x)?,
            Elem::Index(i) => cur.as_array_mut()?.get_mut(i)?,
        };
    }
    Some(cur)
}

/// Merges an apply configuration onto the live value: maps recursively,
/// keyed lists item by item, sets by union, everything else replaced.
/// `null` in the configuration removes the field.
fn merge_values(
    live: Option<&Value>,
    config: &Value,
    names: &mut Vec<String>,
    lt: &dyn MergeKeys,
) -> Value {
    match (live, config) {
        // An atomic object is replaced whole, its `null`s dropped as a new object's are.
        (Some(Value::Object(l)), Value::Object(_)) if !l.is_empty() && is_atomic(lt, names) => {
            let empty = Value::Object(Map::new());
            merge_values(Some(&empty), config, names, lt)
        }
        (Some(Value::Object(l)), Value::Object(c)) => {
            let mut out = l.clone();
            for (k, cv) in c {
                if cv.is_null() {
                    out.shift_remove(k);
                    continue;
                }
                names.push(k.clone());
                let merged = merge_values(l.get(k), cv, names, lt);
                names.pop();
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(c)) => {
            let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
            match resolve_list_type(lt, &name_refs) {
                ListType::Atomic => config.clone(),
                ListType::Set => {
                    let mut out = l.clone();
                    for v in c {
                        if !out.contains(v) {
                            out.push(v.clone());
                        }
                    }
                    Value::Array(out)
                }
                ListType::Map(keys) => {
                    let mut out = l.clone();
                    for item in c {
                        let key = item_key(item, &keys).and_then(|k| parse_elem(&k)).and_then(
                            |e| match e {
                                Elem::Key(k) => Some(k),
                                _ => None,
                            },
                        );
                        let pos = key
                            .as_ref()
                            .and_then(|k| out.iter().position(|o| key_matches(o, k)));
                        match pos {
                            Some(i) => {
                                let merged = merge_values(Some(&out[i]), item, names, lt);
                                out[i] = merged;
                            }
                            None => out.push(merge_values(None, item, names, lt)),
                        }
                    }
                    Value::Array(out)
                }
            }
        }
        (_, Value::Object(c)) => {
            let empty = Value::Object(Map::new());
            if c.is_empty() {
                return empty;
            }
            merge_values(Some(&empty), config, names, lt)
        }
        // A new list still goes through the list logic, so that `null`s in
        // keyed items are dropped and sets are deduplicated.
        (_, Value::Array(_)) => merge_values(Some(&Value::Array(Vec::new())), config, names, lt),
        _ => config.clone(),
    }
}

// ---------------------------------------------------------------------------
// FieldsV1 encoding
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Trie {
    member: bool,
    children: std::collections::BTreeMap<String, Trie>,
}

fn to_fields_v1(set: &BTreeSet<Path>) -> Value {
    let mut root = Trie::default();
    for p in set {
        let mut node = &mut root;
        for e in p {
            node = node.children.entry(e.clone()).or_default();
        }
        node.member = true;
    }
    fn emit(t: &Trie) -> Value {
        let mut m = Map::new();
        if t.member && !t.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &t.children {
            m.insert(k.clone(), emit(c));
        }
        Value::Object(m)
    }
    emit(&root)
}

fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(m) = v.as_object() else {
            return;
        };
        if m.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, c) in m {
            if k == "." {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                continue;
            }
            path.push(k.clone());
            walk(c, path, out);
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// Upstream's `fieldpath.Path` spelling: `.spec.containers[name="c"].image`.
fn display_path(p: &[String]) -> String {
    let mut s = String::new();
    for e in p {
        match parse_elem(e) {
            Some(Elem::Field(f)) => {
                s.push('.');
                s.push_str(&f);
            }
            Some(Elem::Key(k)) => {
                let parts: Vec<String> = k.iter().map(|(n, v)| format!("{n}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            Some(Elem::Val(v)) => s.push_str(&format!("[={v}]")),
            Some(Elem::Index(i)) => s.push_str(&format!("[{i}]")),
            None => s.push_str(e),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::{MergeKeyTable, merge_patch};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:01:00Z";

    fn mcp_keys() -> MergeKeyTable {
        let mut t = MergeKeyTable::metadata_only();
        t.insert("status.conditions", ListType::map(["type"]));
        t
    }

    fn mc(args: Value) -> Value {
        json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "99-worker-ssa", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}}, "kernelArguments": args}
        })
    }

    #[test]
    fn create_records_apply_entry_in_fields_v1() {
        let keys = mcp_keys();
        let out = apply(
            None,
            &mc(json!(["nosmt"])),
            "kubectl",
            false,
            ApplyOptions::new(T1, &keys),
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl", "operation": "Apply",
                "apiVersion": "machineconfiguration.openshift.io/v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:machineconfiguration.openshift.io/role": {}}},
                    "f:spec": {"f:config": {"f:ignition": {"f:version": {}}}, "f:kernelArguments": {}}
                }
            }])
        );
        assert_eq!(out["spec"]["kernelArguments"], json!(["nosmt"]));
    }

    #[test]
    fn reapply_same_manager_replaces_and_prunes() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let mut first = mc(json!(["nosmt"]));
        first["spec"]["osImageURL"] = json!("quay.io/x");
        let live = apply(None, &first, "kubectl", false, o).unwrap();
        let second = mc(json!(["nosmt", "mitigations=off"]));
        let out = apply(
            Some(&live),
            &second,
            "kubectl",
            false,
            ApplyOptions::new(T2, &keys),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["kernelArguments"],
            json!(["nosmt", "mitigations=off"])
        );
        assert!(
            out["spec"].get("osImageURL").is_none(),
            "omitted field is pruned"
        );
        let entries = managed_entries(&out);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].time.as_deref(), Some(T2));
    }

    #[test]
    fn conflict_with_update_manager_then_force() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        // Created by client-side apply: an Update entry owns everything.
        let created = record_update(None, &mc(json!(["nosmt"])), "kubectl-client-side-apply", o);
        let err = apply(Some(&created), &mc(json!(["other"])), "kubectl", false, o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using machineconfiguration.openshift.io/v1: .spec.kernelArguments"
        );
        let ApplyError::Conflict(cs) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(cs[0].field, ".spec.kernelArguments");
        assert_eq!(
            cs[0].message(),
            "conflict with \"kubectl-client-side-apply\" using machineconfiguration.openshift.io/v1"
        );

        // Same value: shared ownership, no conflict.
        let shared = apply(Some(&created), &mc(json!(["nosmt"])), "kubectl", false, o).unwrap();
        let es = managed_entries(&shared);
        assert!(es.iter().all(|e| e.owns(".spec.kernelArguments")), "{es:?}");

        // Forced: ownership moves.
        let forced = apply(Some(&created), &mc(json!(["other"])), "kubectl", true, o).unwrap();
        assert_eq!(forced["spec"]["kernelArguments"], json!(["other"]));
        let es = managed_entries(&forced);
        let csa = es
            .iter()
            .find(|e| e.manager == "kubectl-client-side-apply")
            .unwrap();
        assert!(!csa.owns(".spec.kernelArguments"));
        assert!(csa.owns(".spec.config.ignition.version"));
        let mine = es.iter().find(|e| e.manager == "kubectl").unwrap();
        assert!(mine.owns(".spec.kernelArguments"));
        // Apply entries sort before Update entries.
        assert_eq!(es[0].operation, Operation::Apply);
    }

    /// A ConfigMap as `kubectl apply` (client-side) leaves it: the configuration in the
    /// last-applied annotation, every field owned by an Update entry.
    fn client_side_applied(data: Value, keys: &MergeKeyTable) -> Value {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm2", "labels": {"tier": "diff"}}, "data": data});
        let mut obj = config.clone();
        obj["metadata"]["annotations"] =
            json!({LAST_APPLIED_ANNOTATION: sorted_keys(config).to_string()});
        record_update(
            None,
            &obj,
            "kubectl-client-side-apply",
            ApplyOptions::new(T1, keys),
        )
    }

    #[test]
    fn kubectl_takes_over_fields_client_side_apply_last_applied() {
        let keys = MergeKeyTable::metadata_only();
        let o = ApplyOptions::new(T2, &keys);
        let live = client_side_applied(json!({"true": "2"}), &keys);
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm2"}, "data": {"true": "3"}});

        let out = apply(Some(&live), &body, KUBECTL_MANAGER, false, o).unwrap();
        assert_eq!(out["data"], json!({"true": "3"}));
        let es = managed_entries(&out);
        let mine = es.iter().find(|e| e.manager == "kubectl").unwrap();
        assert!(mine.owns(".data.true"), "{es:?}");
        let csa = es
            .iter()
            .find(|e| e.manager == "kubectl-client-side-apply")
            .unwrap();
        assert!(!csa.owns(".data.true") && csa.owns(".metadata.labels.tier"));
        // The annotation now records what kubectl applied, keys sorted.
        assert_eq!(
            out["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
            json!(
                "{\"apiVersion\":\"v1\",\"data\":{\"true\":\"3\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm2\"}}\n"
            )
        );

        // Any other manager still conflicts.
        let err = apply(Some(&live), &body, "other", false, o).unwrap_err();
        assert!(err.to_string().contains(".data.true"), "{err}");
    }

    #[test]
    fn last_applied_is_encoded_as_go_does() {
        let v = json!({"b": "<a&b>\u{2028}", "a": 1});
        assert_eq!(
            go_json(&sorted_keys(v)),
            "{\"a\":1,\"b\":\"\\u003ca\\u0026b\\u003e\\u2028\"}\n"
        );
    }

    #[test]
    fn kubectl_still_conflicts_where_the_live_value_left_last_applied() {
        let keys = MergeKeyTable::metadata_only();
        let live = client_side_applied(json!({"a": "1", "b": "1"}), &keys);
        // Someone else changed `a` after the client-side apply: it is no longer the value
        // last applied, so only `b` may be taken over.
        let mut edited = live.clone();
        edited["data"]["a"] = json!("9");
        let edited = record_update(Some(&live), &edited, "editor", ApplyOptions::new(T2, &keys));
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm2"}, "data": {"a": "2", "b": "2"}});
        let err = apply(
            Some(&edited),
            &body,
            KUBECTL_MANAGER,
            false,
            ApplyOptions::new(T2, &keys),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.a"
        );
        // Without an annotation nothing is exempt.
        let mut bare = live.clone();
        bare["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        let err = apply(
            Some(&bare),
            &body,
            KUBECTL_MANAGER,
            false,
            ApplyOptions::new(T2, &keys),
        )
        .unwrap_err();
        assert!(err.to_string().contains("2 conflicts"), "{err}");
    }

    #[test]
    fn kubectl_patch_after_apply_makes_next_apply_conflict() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let pool = json!({"apiVersion":"machineconfiguration.openshift.io/v1","kind":"MachineConfigPool",
                          "metadata":{"name":"worker"},"spec":{"paused":false,"maxUnavailable":1}});
        let live = apply(None, &pool, "mco", false, o).unwrap();
        let patched = merge_patch(&live, &json!({"spec":{"paused":true}})).unwrap();
        let after = record_update(
            Some(&live),
            &patched,
            "kubectl-patch",
            ApplyOptions::new(T2, &keys),
        );
        let es = managed_entries(&after);
        let patcher = es.iter().find(|e| e.manager == "kubectl-patch").unwrap();
        assert_eq!(patcher.paths(), vec![".spec.paused"]);
        assert_eq!(patcher.operation, Operation::Update);
        let mco = es.iter().find(|e| e.manager == "mco").unwrap();
        assert!(!mco.owns(".spec.paused"));

        let err = apply(Some(&after), &pool, "mco", false, o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-patch\" using machineconfiguration.openshift.io/v1: .spec.paused"
        );
    }

    #[test]
    fn multiple_conflicts_message() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let base = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"2","c":"3"}});
        let live = record_update(None, &base, "zeta", o);
        let live = record_update(
            Some(&live),
            &merge_patch(&live, &json!({"data":{"c":"4"}})).unwrap(),
            "alpha",
            o,
        );
        let applied = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"x","b":"y","c":"z"}});
        let err = apply(Some(&live), &applied, "me", false, o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"alpha\" using v1:\n- .data.c\nconflicts with \"zeta\" using v1:\n- .data.a\n- .data.b"
        );
    }

    #[test]
    fn keyed_lists_use_k_notation_and_merge_by_key() {
        let keys = mcp_keys();
        let o = ApplyOptions::for_status(T1, &keys);
        let live = json!({"apiVersion":"machineconfiguration.openshift.io/v1","kind":"MachineConfigNode",
            "metadata":{"name":"worker-0","managedFields":[{"manager":"other","operation":"Apply","apiVersion":"machineconfiguration.openshift.io/v1","fieldsType":"FieldsV1",
                "fieldsV1":{"f:status":{"f:conditions":{"k:{\"type\":\"Other\"}":{".":{},"f:type":{},"f:status":{}}}}},"subresource":"status"}]},
            "spec":{"node":{"name":"worker-0"}},
            "status":{"conditions":[{"type":"Other","status":"True"}]}});
        let applied = json!({"apiVersion":"machineconfiguration.openshift.io/v1","kind":"MachineConfigNode",
            "metadata":{"name":"worker-0"},
            "spec":{"node":{"name":"ignored"}},
            "status":{"conditions":[{"type":"Updated","status":"False","reason":"x"}]}});
        let out = apply(Some(&live), &applied, "machine-config-daemon", false, o).unwrap();
        assert_eq!(
            out["spec"]["node"]["name"],
            json!("worker-0"),
            "spec ignored on /status"
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type":"Other","status":"True"},{"type":"Updated","status":"False","reason":"x"}])
        );
        let mf = out["metadata"]["managedFields"].as_array().unwrap();
        let mine = mf
            .iter()
            .find(|e| e["manager"] == "machine-config-daemon")
            .unwrap();
        assert_eq!(mine["subresource"], json!("status"));
        assert_eq!(
            mine["fieldsV1"],
            json!({"f:status":{"f:conditions":{"k:{\"type\":\"Updated\"}":{".":{},"f:reason":{},"f:status":{},"f:type":{}}}}})
        );
        let es = managed_entries(&out);
        let e = es
            .iter()
            .find(|e| e.manager == "machine-config-daemon")
            .unwrap();
        assert!(e.owns(".status.conditions[type=\"Updated\"].reason"));

        // Dropping the condition later removes only this manager's item.
        let applied2 = json!({"apiVersion":"machineconfiguration.openshift.io/v1","kind":"MachineConfigNode",
            "metadata":{"name":"worker-0"},"status":{"conditions":[]}});
        let out2 = apply(Some(&out), &applied2, "machine-config-daemon", false, o).unwrap();
        assert_eq!(
            out2["status"]["conditions"],
            json!([{"type":"Other","status":"True"}])
        );
    }

    #[test]
    fn keyed_item_conflict_path() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let obj = |status: &str| {
            json!({"apiVersion":"v1","kind":"X","metadata":{"name":"n"},
            "status":{"conditions":[{"type":"Ready","status":status}]}})
        };
        let live = apply(None, &obj("True"), "a", false, o).unwrap();
        let err = apply(Some(&live), &obj("False"), "b", false, o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"a\": .status.conditions[type=\"Ready\"].status"
        );
    }

    #[test]
    fn pruning_keeps_fields_other_managers_own() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let cm = |data: Value| json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":data});
        let live = apply(None, &cm(json!({"a":"1","b":"2"})), "one", false, o).unwrap();
        let live = apply(Some(&live), &cm(json!({"b":"2"})), "two", false, o).unwrap();
        let bare = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}});
        let out = apply(Some(&live), &bare, "one", false, o).unwrap();
        assert_eq!(out["data"], json!({"b":"2"}));
        let es = managed_entries(&out);
        assert_eq!(es.len(), 1, "{es:?}");
        assert_eq!(es[0].manager, "two");
    }

    #[test]
    fn set_lists_use_v_notation() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let obj = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","finalizers":["a/b","c/d"]}});
        let out = apply(None, &obj, "m", false, o).unwrap();
        assert_eq!(
            out["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata":{"f:finalizers":{"v:\"a/b\"":{},"v:\"c/d\"":{}}}})
        );
        let es = managed_entries(&out);
        assert_eq!(
            es[0].paths(),
            vec![
                ".metadata.finalizers[=\"a/b\"]",
                ".metadata.finalizers[=\"c/d\"]"
            ]
        );
        // Another manager adds one value; the set merges.
        let other = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","finalizers":["e/f"]}});
        let out = apply(Some(&out), &other, "n", false, o).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a/b", "c/d", "e/f"]));
    }

    #[test]
    fn first_apply_on_unmanaged_object_conflicts_with_before_first_apply() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let live = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","uid":"u"},"data":{"a":"1"}});
        let err = apply(
            Some(&live),
            &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"2"}}),
            "m",
            false,
            o,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.a"
        );
    }

    #[test]
    fn main_endpoint_ignores_status_when_reset() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys).with_reset_fields(&["status"]);
        let live =
            json!({"apiVersion":"v1","kind":"X","metadata":{"name":"n"},"status":{"phase":"Old"}});
        let applied = json!({"apiVersion":"v1","kind":"X","metadata":{"name":"n"},"spec":{"a":1},"status":{"phase":"New"}});
        let out = apply(Some(&live), &applied, "m", false, o).unwrap();
        assert_eq!(out["status"]["phase"], json!("Old"));
        let es = managed_entries(&out);
        let m = es.iter().find(|e| e.manager == "m").unwrap();
        assert_eq!(m.paths(), vec![".spec.a"]);
    }

    #[test]
    fn invalid_configurations() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let cases: Vec<(Value, &str)> = vec![
            (json!([1]), "must be an object"),
            (json!({"kind":"X"}), "apiVersion must be set"),
            (json!({"apiVersion":"v1"}), "kind must be set"),
            (
                json!({"apiVersion":"v1","kind":"X","status":{"conditions":[{"status":"x"}]}}),
                ".status.conditions: element 0: associative list with keys has an element that omits key field \"type\"",
            ),
            (
                json!({"apiVersion":"v1","kind":"X","status":{"conditions":[{"type":"A"},{"type":"A"}]}}),
                "duplicate entries for key [type=\"A\"]",
            ),
        ];
        for (applied, needle) in cases {
            let err = apply(None, &applied, "m", false, o).unwrap_err();
            assert!(matches!(err, ApplyError::Invalid(_)), "{err:?}");
            assert!(err.to_string().contains(needle), "{applied} -> {err}");
        }
    }

    #[test]
    fn record_update_transfers_and_drops_removed_fields() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"2"}});
        let live = apply(None, &cm, "applier", false, o).unwrap();
        let edited = merge_patch(&live, &json!({"data":{"a":null,"c":"3"}})).unwrap();
        let out = record_update(
            Some(&live),
            &edited,
            "kubectl-edit",
            ApplyOptions::new(T2, &keys),
        );
        let es = managed_entries(&out);
        let applier = es.iter().find(|e| e.manager == "applier").unwrap();
        assert_eq!(applier.paths(), vec![".data.b"]);
        let editor = es.iter().find(|e| e.manager == "kubectl-edit").unwrap();
        assert_eq!(editor.paths(), vec![".data.c"]);
        assert_eq!(editor.time.as_deref(), Some(T2));

        // A no-op write adds no entry.
        let same = record_update(Some(&out), &out, "noop", o);
        assert!(managed_entries(&same).iter().all(|e| e.manager != "noop"));
    }

    #[test]
    fn record_update_takes_only_what_changed_under_unchanged_neighbours() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let node = json!({"apiVersion":"v1","kind":"Node",
            "metadata":{"name":"n","annotations":{"a":"1","b":"2"},"labels":{"l":"x"}},
            "spec":{"unschedulable":false},
            "status":{"conditions":[{"type":"Ready","status":"True"},{"type":"Disk","status":"False"}]}});
        let live = apply(None, &node, "kubelet", false, o).unwrap();
        // One annotation (two levels down, its siblings unchanged) and one keyed item's field.
        let mut edited =
            merge_patch(&live, &json!({"metadata":{"annotations":{"b":"3"}}})).unwrap();
        edited["status"]["conditions"][1]["status"] = json!("True");
        let out = record_update(Some(&live), &edited, "daemon", ApplyOptions::new(T2, &keys));
        let es = managed_entries(&out);
        let daemon = es.iter().find(|e| e.manager == "daemon").unwrap();
        assert_eq!(
            daemon.paths(),
            vec![
                ".metadata.annotations.b",
                ".status.conditions[type=\"Disk\"].status"
            ]
        );
        let kubelet = es.iter().find(|e| e.manager == "kubelet").unwrap();
        assert!(kubelet.owns(".metadata.annotations.a"));
        assert!(kubelet.owns(".metadata.labels.l"));
        assert!(kubelet.owns(".spec.unschedulable"));
        assert!(kubelet.owns(".status.conditions[type=\"Ready\"].status"));
        assert!(!kubelet.owns(".metadata.annotations.b"));
    }

    /// Keyed items compare whole before their fields are looked at: reordered items are
    /// unchanged, an added one is the writer's, a removed one leaves every owner.
    #[test]
    fn record_update_judges_keyed_items_whole() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let node = json!({"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},
            "status":{"conditions":[
                {"type":"Ready","status":"True","message":"ok"},
                {"type":"Disk","status":"False","message":"fine"},
                {"type":"Pid","status":"False","message":"fine"}]}});
        let live = apply(None, &node, "kubelet", false, o).unwrap();
        let mut edited = live.clone();
        edited["status"]["conditions"] = json!([
            {"type":"Pid","status":"False","message":"fine"},
            {"type":"Ready","status":"True","message":"ok"},
            {"type":"Mem","status":"True","message":"low"}]);
        let out = record_update(Some(&live), &edited, "daemon", ApplyOptions::new(T2, &keys));
        let es = managed_entries(&out);
        let daemon = es.iter().find(|e| e.manager == "daemon").unwrap();
        assert!(daemon.owns(".status.conditions[type=\"Mem\"].status"));
        assert!(
            !daemon
                .paths()
                .iter()
                .any(|p| p.contains("Ready") || p.contains("Pid"))
        );
        let kubelet = es.iter().find(|e| e.manager == "kubelet").unwrap();
        assert!(kubelet.owns(".status.conditions[type=\"Ready\"].message"));
        assert!(kubelet.owns(".status.conditions[type=\"Pid\"].status"));
        assert!(!kubelet.paths().iter().any(|p| p.contains("Disk")));
    }

    #[test]
    fn nulls_in_new_keyed_items_are_dropped() {
        let keys = mcp_keys();
        let o = ApplyOptions::new(T1, &keys);
        let obj = json!({"apiVersion":"v1","kind":"X","metadata":{"name":"n"},
            "status":{"conditions":[{"type":"A","status":"True","reason":null}]}});
        let out = apply(None, &obj, "m", false, o).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type":"A","status":"True"}])
        );
        let es = managed_entries(&out);
        assert!(!es[0].owns(".status.conditions[type=\"A\"].reason"));
        assert!(es[0].owns(".status.conditions[type=\"A\"].status"));
    }

    #[test]
    fn manager_names_from_user_agents() {
        assert_eq!(
            manager_from_user_agent("kubectl/v1.32.5 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(manager_from_user_agent(""), "");
        assert_eq!(
            manager_from_user_agent(&"x".repeat(300)).len(),
            MAX_MANAGER_LEN
        );
    }

    /// The `fieldsV1` of the entry of `manager`.
    fn fields_of(obj: &Value, manager: &str) -> Value {
        obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == manager)
            .unwrap_or_else(|| panic!("no entry of {manager} in {obj}"))["fieldsV1"]
            .clone()
    }

    /// A custom resource's schema: a struct `spec` with a free-form `config`, and
    /// conditions keyed by type under `status`.
    fn pool_keys() -> MergeKeyTable {
        MergeKeyTable::from_openapi_schema(&json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "paused": {"type": "boolean"},
                "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "selector": {"type": "object", "properties": {
                    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}}}},
            "status": {"type": "object", "properties": {
                "machineCount": {"type": "integer"},
                "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                    "items": {"type": "object", "properties": {
                        "type": {"type": "string"}, "status": {"type": "string"}}}}}}}}))
    }

    /// A create adds every map it sets: `labels` and `data` are owned themselves (`.`).
    #[test]
    fn create_owns_the_maps_it_adds() {
        let keys = MergeKeyTable::builtin("", "ConfigMap").unwrap();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "gen-", "labels": {"gen": "yes"}}, "data": {"k": "v"}});
        let out = record_update(None, &cm, "creator", ApplyOptions::new(T1, &keys));
        assert_eq!(
            fields_of(&out, "creator"),
            json!({"f:data": {".": {}, "f:k": {}},
                   "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:gen": {}}}})
        );
    }

    /// An update that adds a map owns it; one that changes a leaf of a map that was there
    /// owns the leaf only, and the map's owner keeps it (`.` alone) when it loses the leaf.
    #[test]
    fn update_owns_an_added_map_not_an_existing_one() {
        let keys = MergeKeyTable::builtin("", "ConfigMap").unwrap();
        let o = ApplyOptions::new(T1, &keys);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"a": "1"}});
        let live = record_update(None, &cm, "creator", o);
        let labeled = merge_patch(&live, &json!({"metadata": {"labels": {"tier": "x"}}})).unwrap();
        let live = record_update(Some(&live), &labeled, "labeler", o);
        assert_eq!(
            fields_of(&live, "labeler"),
            json!({"f:metadata": {"f:labels": {".": {}, "f:tier": {}}}})
        );
        let edited = merge_patch(
            &live,
            &json!({"metadata": {"labels": {"tier": "y"}}, "data": {"a": "2"}}),
        )
        .unwrap();
        let out = record_update(Some(&live), &edited, "editor", o);
        assert_eq!(
            fields_of(&out, "editor"),
            json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:tier": {}}}})
        );
        assert_eq!(fields_of(&out, "creator"), json!({"f:data": {}}));
        assert_eq!(
            fields_of(&out, "labeler"),
            json!({"f:metadata": {"f:labels": {}}})
        );
    }

    /// A status write adding `status` and a keyed condition owns the map, the list and the
    /// item; a later condition added to the list owns its item only.
    #[test]
    fn status_patch_owns_the_condition_it_adds() {
        let keys = pool_keys();
        let o = ApplyOptions::for_status(T1, &keys);
        let pool = json!({"apiVersion": "x.io/v1", "kind": "Pool", "metadata": {"name": "p"},
            "spec": {"paused": false}});
        let live = record_update(None, &pool, "creator", ApplyOptions::new(T1, &keys));
        assert_eq!(
            fields_of(&live, "creator"),
            json!({"f:spec": {".": {}, "f:paused": {}}})
        );
        let ready = merge_patch(
            &live,
            &json!({"status": {"machineCount": 2, "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .unwrap();
        let live = record_update(Some(&live), &ready, "controller", o);
        assert_eq!(
            fields_of(&live, "controller"),
            json!({"f:status": {".": {}, "f:conditions": {".": {},
                "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}},
                "f:machineCount": {}}})
        );
        let mut degraded = live.clone();
        degraded["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Degraded", "status": "False"}));
        let out = record_update(Some(&live), &degraded, "daemon", o);
        assert_eq!(
            fields_of(&out, "daemon"),
            json!({"f:status": {"f:conditions": {
                "k:{\"type\":\"Degraded\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
    }

    /// A by-value struct of a built-in kind (a Node's `spec` and `status`, a Lease's `spec`)
    /// is in kube-apiserver's typed object before the write: nobody adds it.
    #[test]
    fn builtin_structs_are_never_added() {
        let keys = MergeKeyTable::builtin("", "Node").unwrap();
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"bootID": "b"}}});
        let out = record_update(None, &node, "kubelet", ApplyOptions::new(T1, &keys));
        assert_eq!(
            fields_of(&out, "kubelet"),
            json!({"f:spec": {"f:unschedulable": {}}, "f:status": {
                "f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}},
                "f:nodeInfo": {"f:bootID": {}}}})
        );
        // An empty `spec` where the stored JSON had none is no change either.
        let bare = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "m"}});
        let live = record_update(None, &bare, "kubelet", ApplyOptions::new(T1, &keys));
        let mut specced = live.clone();
        specced["spec"] = json!({});
        let out = record_update(Some(&live), &specced, "other", ApplyOptions::new(T1, &keys));
        assert!(out["metadata"].get("managedFields").is_none(), "{out}");
        let lease_keys = MergeKeyTable::builtin("coordination.k8s.io", "Lease").unwrap();
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}});
        let out = record_update(None, &lease, "holder", ApplyOptions::new(T1, &lease_keys));
        assert_eq!(
            fields_of(&out, "holder"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
    }

    /// An apply owns keyed list items and map entries themselves, never declared fields:
    /// `labels` and `spec` have no `.`, an entry of a free-form object does.
    #[test]
    fn apply_owns_items_and_map_entries() {
        let keys = pool_keys();
        let pool = json!({"apiVersion": "x.io/v1", "kind": "Pool",
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}, "flat": 1},
                     "selector": {"matchLabels": {"role": "worker"}}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let out = apply(None, &pool, "applier", false, ApplyOptions::new(T1, &keys)).unwrap();
        assert_eq!(
            fields_of(&out, "applier"),
            json!({"f:metadata": {"f:labels": {"f:a": {}}},
                   "f:spec": {"f:config": {"f:flat": {}, "f:ignition": {".": {}, "f:version": {}}},
                              "f:selector": {"f:matchLabels": {"f:role": {}}}},
                   "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
    }

    /// A map owned itself by one manager and its entries by others: an apply conflicts only
    /// with the entry's owner, and dropping its entry leaves the map to its owner.
    #[test]
    fn apply_treats_a_map_owner_apart_from_its_entries() {
        let keys = MergeKeyTable::builtin("", "ConfigMap").unwrap();
        let o = ApplyOptions::new(T1, &keys);
        let cm = |labels: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "labels": labels}})
        };
        let live = record_update(None, &cm(json!({"a": "1"})), "creator", o);
        let live = apply(Some(&live), &cm(json!({"a": "2"})), "applier", true, o).unwrap();
        assert_eq!(
            fields_of(&live, "creator"),
            json!({"f:metadata": {"f:labels": {}}})
        );
        let err = apply(Some(&live), &cm(json!({"a": "3"})), "third", false, o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"applier\": .metadata.labels.a"
        );
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let out = apply(Some(&live), &bare, "applier", false, o).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({}));
        assert_eq!(
            fields_of(&out, "creator"),
            json!({"f:metadata": {"f:labels": {}}})
        );
    }

    fn event() -> Value {
        json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e.1", "namespace": "ns"},
            "involvedObject": {"kind": "ConfigMap", "namespace": "ns", "name": "cm", "uid": "u1"},
            "reason": "Created", "message": "m", "type": "Normal"})
    }

    /// An atomic struct (an Event's `involvedObject`) is owned whole by the write that sets
    /// it, and a change to any of its fields takes it whole.
    #[test]
    fn an_atomic_struct_is_owned_whole() {
        let keys = MergeKeyTable::builtin("", "Event").unwrap();
        let o = ApplyOptions::new(T1, &keys);
        let live = record_update(None, &event(), "creator", o);
        assert_eq!(
            fields_of(&live, "creator"),
            json!({"f:involvedObject": {}, "f:message": {}, "f:reason": {}, "f:type": {}})
        );
        let mut moved = live.clone();
        moved["involvedObject"]["fieldPath"] = json!("data.k");
        let out = record_update(Some(&live), &moved, "mover", o);
        assert_eq!(fields_of(&out, "mover"), json!({"f:involvedObject": {}}));
        assert_eq!(
            fields_of(&out, "creator"),
            json!({"f:message": {}, "f:reason": {}, "f:type": {}})
        );
    }

    /// An apply replaces an atomic struct whole, and conflicts over it as one field.
    #[test]
    fn apply_replaces_an_atomic_struct_whole() {
        let keys = MergeKeyTable::builtin("", "Event").unwrap();
        let o = ApplyOptions::new(T1, &keys);
        let live = record_update(None, &event(), "creator", o);
        let applied = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e.1", "namespace": "ns"},
            "involvedObject": {"kind": "ConfigMap", "namespace": "ns", "name": "cm", "fieldPath": "data.k"}});
        let err = apply(Some(&live), &applied, "applier", false, o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"creator\" using v1: .involvedObject"
        );
        let out = apply(Some(&live), &applied, "applier", true, o).unwrap();
        assert_eq!(out["involvedObject"], applied["involvedObject"]);
        assert_eq!(fields_of(&out, "applier"), json!({"f:involvedObject": {}}));
    }

    /// Owner references are atomic items of a keyed list: each is owned as `k:{..}` alone, and
    /// a change to one of its fields takes it.
    #[test]
    fn owner_references_are_atomic_items() {
        let keys = MergeKeyTable::builtin("", "ConfigMap").unwrap();
        let o = ApplyOptions::new(T1, &keys);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}]}});
        let live = record_update(None, &cm, "creator", o);
        assert_eq!(
            fields_of(&live, "creator"),
            json!({"f:metadata": {"f:ownerReferences": {".": {}, "k:{\"uid\":\"u1\"}": {}}}})
        );
        let mut adopted = live.clone();
        adopted["metadata"]["ownerReferences"][0]["controller"] = json!(true);
        let out = record_update(Some(&live), &adopted, "adopter", o);
        assert_eq!(
            fields_of(&out, "adopter"),
            json!({"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}}})
        );
        assert_eq!(
            fields_of(&out, "creator"),
            json!({"f:metadata": {"f:ownerReferences": {}}})
        );
    }

    /// A CRD schema's `x-kubernetes-map-type: atomic` makes its object one value.
    #[test]
    fn a_schema_atomic_map_is_one_value() {
        let keys = MergeKeyTable::from_openapi_schema(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}));
        let o = ApplyOptions::new(T1, &keys);
        let pool = json!({"apiVersion": "x.io/v1", "kind": "Pool", "metadata": {"name": "p"},
            "spec": {"selector": {"matchLabels": {"a": "1", "b": "2"}}}});
        let live = apply(None, &pool, "applier", false, o).unwrap();
        assert_eq!(
            fields_of(&live, "applier"),
            json!({"f:spec": {"f:selector": {}}})
        );
        let narrowed = json!({"apiVersion": "x.io/v1", "kind": "Pool", "metadata": {"name": "p"},
            "spec": {"selector": {"matchLabels": {"a": "1"}}}});
        let out = apply(Some(&live), &narrowed, "applier", false, o).unwrap();
        assert_eq!(out["spec"]["selector"], json!({"matchLabels": {"a": "1"}}));
    }

    /// A custom resource's status write owns nothing outside `status`: a label it carries is
    /// neither owned nor, through an apply, set.
    #[test]
    fn a_status_write_owns_only_status() {
        let keys = pool_keys();
        let o = ApplyOptions::for_status(T1, &keys);
        let pool = json!({"apiVersion": "x.io/v1", "kind": "Pool", "metadata": {"name": "p"},
            "spec": {"paused": false}});
        let live = record_update(None, &pool, "creator", ApplyOptions::new(T1, &keys));
        let patched = merge_patch(
            &live,
            &json!({"metadata": {"labels": {"l": "x"}}, "status": {"machineCount": 2}}),
        )
        .unwrap();
        let out = record_update(Some(&live), &patched, "controller", o);
        assert_eq!(
            fields_of(&out, "controller"),
            json!({"f:status": {".": {}, "f:machineCount": {}}})
        );
        let applied = json!({"apiVersion": "x.io/v1", "kind": "Pool",
            "metadata": {"name": "p", "labels": {"l": "x"}}, "status": {"machineCount": 3}});
        let out = apply(Some(&live), &applied, "daemon", false, o).unwrap();
        assert_eq!(out["metadata"].get("labels"), None);
        assert_eq!(
            fields_of(&out, "daemon"),
            json!({"f:status": {"f:machineCount": {}}})
        );
        // A Node's status strategy resets only its spec.
        assert_eq!(status_reset_fields("", "Node", false), ["spec"]);
    }

    #[test]
    fn fields_v1_round_trip() {
        let v = json!({"f:metadata":{"f:labels":{".":{},"f:a":{}}},
                       "f:status":{"f:conditions":{"k:{\"type\":\"R\"}":{".":{},"f:type":{}}}}});
        let set = from_fields_v1(&v);
        assert_eq!(to_fields_v1(&set), v);
        let paths: Vec<String> = set.iter().map(|p| display_path(p)).collect();
        assert_eq!(
            paths,
            vec![
                ".metadata.labels",
                ".metadata.labels.a",
                ".status.conditions[type=\"R\"]",
                ".status.conditions[type=\"R\"].type"
            ]
        );
    }
}
