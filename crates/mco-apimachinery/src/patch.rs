//! The three PATCH bodies kube-apiserver accepts besides apply: JSON merge
//! patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.
//!
//! Strategic merge patch needs to know, per list, how to merge it. That
//! knowledge comes from a [`MergeKeys`] lookup keyed by the list's field path
//! (list positions omitted, e.g. `spec.containers.env`), so the same lookup
//! serves built-in kinds ([`MergeKeyTable::builtin`]), CRD schemas
//! ([`MergeKeyTable::from_openapi_schema`]) and server-side apply.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use thiserror::Error;

/// How a list merges, in the vocabulary of `x-kubernetes-list-type`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ListType {
    /// Replaced whole (the default for lists nobody declared).
    #[default]
    Atomic,
    /// A list of scalars merged as a set (`metadata.finalizers`).
    Set,
    /// A list of objects merged by key fields (`x-kubernetes-list-map-keys`).
    /// Strategic merge patch only uses the first key, as upstream's single
    /// `patchMergeKey`; server-side apply uses them all.
    Map(Vec<String>),
}

impl ListType {
    /// Shorthand for a map list.
    pub fn map<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ListType::Map(keys.into_iter().map(Into::into).collect())
    }
}

/// Tells how the list at a field path merges.
///
/// `path` holds the field names from the object root to the list, with list
/// positions left out: the env of any container of a Deployment is
/// `["spec", "template", "spec", "containers", "env"]`.
pub trait MergeKeys {
    fn list_type(&self, path: &[&str]) -> ListType;

    /// Whether the child `key` of the object at `path` is a map entry (an
    /// `additionalProperties` key, or any key under
    /// `x-kubernetes-preserve-unknown-fields` or a schema-less object) rather
    /// than a declared field. Server-side apply owns such an entry itself, not
    /// only its leaves, as structured-merge-diff's `ToFieldSet` does.
    fn free_key(&self, _path: &[&str], _key: &str) -> bool {
        false
    }

    /// Whether the object at `path` is always there in kube-apiserver's typed
    /// form of an object whose parent is there (a Go struct held by value, such
    /// as a Node's `spec`): a write that sets it for the first time in JSON did
    /// not add it, so it does not take ownership of it. Asked only of objects
    /// reached through objects from the root, not through list items.
    fn always_present(&self, _path: &[&str]) -> bool {
        false
    }

    /// Whether the object at `path` (a struct marked `+structType=atomic`, a map
    /// marked `+mapType=atomic`, or a schema's `x-kubernetes-map-type: atomic`)
    /// is one value: owned as a whole (`f:involvedObject: {}`, nothing under
    /// it), replaced whole by an apply, and changed when any part of it
    /// changes. A list's items are asked by the list's path. Strategic merge
    /// patch does not ask: upstream's merges such objects key by key. Asked of
    /// every object a write walks, so `path` is the walk's own names, not a
    /// slice built for the question.
    fn atomic(&self, _path: &[String]) -> bool {
        false
    }
}

impl<F> MergeKeys for F
where
    F: Fn(&[&str]) -> ListType,
{
    fn list_type(&self, path: &[&str]) -> ListType {
        self(path)
    }
}

/// Looks a list up, treating a map list declared without keys as atomic so
/// that a bad declaration cannot make merging panic.
pub(crate) fn resolve_list_type(keys: &dyn MergeKeys, path: &[&str]) -> ListType {
    match keys.list_type(path) {
        ListType::Map(k) if k.is_empty() => ListType::Atomic,
        lt => lt,
    }
}

/// A [`MergeKeys`] lookup held as a table from dotted paths to list types,
/// with the object shapes of a CRD schema and a built-in kind's by-value structs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeKeyTable {
    entries: HashMap<String, ListType>,
    /// Where objects take keys beyond their declared fields (CRD schemas).
    shape: Option<Shape>,
    /// Dotted paths of the objects [`MergeKeys::always_present`] names.
    present: HashSet<String>,
    /// Dotted paths of the objects [`MergeKeys::atomic`] names, and their last
    /// names: most objects are ruled out by their name without joining a path.
    atomic: HashSet<String>,
    atomic_last: HashSet<String>,
}

impl MergeKeys for MergeKeyTable {
    fn list_type(&self, path: &[&str]) -> ListType {
        self.entries
            .get(&path.join("."))
            .cloned()
            .unwrap_or_default()
    }

    fn free_key(&self, path: &[&str], key: &str) -> bool {
        // `metadata` is ObjectMeta whatever a CRD's schema says of it.
        if path.first() == Some(&"metadata") || (path.is_empty() && key == "metadata") {
            return false;
        }
        self.shape.as_ref().is_some_and(|s| s.free_key(path, key))
    }

    fn always_present(&self, path: &[&str]) -> bool {
        !self.present.is_empty() && self.present.contains(&path.join("."))
    }

    fn atomic(&self, path: &[String]) -> bool {
        path.last().is_some_and(|l| self.atomic_last.contains(l))
            && self.atomic.contains(&path.join("."))
    }
}

/// Which keys of an object are declared fields, as structured-merge-diff's
/// schema conversion of an OpenAPI schema decides (kube-openapi `schemaconv`).
/// A list's node stands for its items, as list positions are left out of paths.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// Any value, every key of any object in it a map entry: an object
    /// without properties, or `additionalProperties: true`.
    Deduced,
    Object {
        fields: HashMap<String, Shape>,
        /// The shape of keys that are not fields, when the object takes them.
        others: Option<Box<Shape>>,
    },
}

impl Shape {
    /// `preserve` is inherited: `x-kubernetes-preserve-unknown-fields` opens
    /// every object below it to unknown keys.
    fn of(schema: &Value, preserve: bool) -> Shape {
        let preserve = preserve
            || schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if schema.get("type").and_then(Value::as_str) == Some("array") {
            return match schema.get("items") {
                Some(items) if items.is_object() => Shape::of(items, preserve),
                _ => Shape::Deduced,
            };
        }
        let props = schema.get("properties").and_then(Value::as_object);
        let fields: HashMap<String, Shape> = props
            .into_iter()
            .flatten()
            .map(|(k, s)| (k.clone(), Shape::of(s, preserve)))
            .collect();
        let others = match schema.get("additionalProperties") {
            Some(Value::Bool(false)) => None,
            Some(ap) if ap.is_object() => Some(Box::new(Shape::of(ap, preserve))),
            Some(_) => Some(Box::new(Shape::Deduced)),
            None if preserve || fields.is_empty() => Some(Box::new(Shape::Deduced)),
            None => None,
        };
        if fields.is_empty() && others.as_deref() == Some(&Shape::Deduced) {
            return Shape::Deduced;
        }
        Shape::Object { fields, others }
    }

    fn child(&self, key: &str) -> Option<&Shape> {
        match self {
            Shape::Deduced => Some(self),
            Shape::Object { fields, others } => fields.get(key).or(others.as_deref()),
        }
    }

    fn free_key(&self, path: &[&str], key: &str) -> bool {
        let mut node = self;
        for name in path {
            match node.child(name) {
                Some(n) => node = n,
                None => return false,
            }
        }
        match node {
            Shape::Deduced => true,
            Shape::Object { fields, others } => !fields.contains_key(key) && others.is_some(),
        }
    }
}

impl MergeKeyTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares the list at the dotted `path` (e.g. `status.conditions`).
    pub fn insert(&mut self, path: impl Into<String>, list_type: ListType) -> &mut Self {
        self.entries.insert(path.into(), list_type);
        self
    }

    /// Looks a dotted path up directly.
    pub fn get(&self, path: &str) -> Option<&ListType> {
        self.entries.get(path)
    }

    /// Only the `metadata` lists every object has.
    pub fn metadata_only() -> Self {
        let mut t = Self::new();
        t.add_object_meta("metadata");
        t
    }

    /// The table for a built-in kind (`group` is `""` for core), or `None`
    /// when the kind is not one strategic merge patch knows. Upstream answers
    /// 415 for strategic merge patches to custom resources; `None` lets the
    /// server do the same.
    pub fn builtin(group: &str, kind: &str) -> Option<Self> {
        let mut t = Self::metadata_only();
        // The by-value structs of each kind's Go type (`always_present`).
        match (group, kind) {
            ("", "Node") => {
                // `spec.taints` stays atomic, as upstream: `kubectl taint`
                // sends the whole remaining list and relies on replacement.
                t.insert("spec.podCIDRs", ListType::Set)
                    .insert("status.conditions", ListType::map(["type"]))
                    .insert("status.addresses", ListType::map(["type"]));
                t.add_present(&[
                    "spec",
                    "status",
                    "status.daemonEndpoints",
                    "status.daemonEndpoints.kubeletEndpoint",
                    "status.nodeInfo",
                ]);
            }
            ("", "Pod") => {
                t.add_pod_spec("spec");
                t.insert("status.conditions", ListType::map(["type"]))
                    .insert("status.podIPs", ListType::map(["ip"]))
                    .insert("status.hostIPs", ListType::map(["ip"]))
                    .insert("status.resourceClaimStatuses", ListType::map(["name"]));
                t.add_present(&["spec", "status"]);
            }
            ("apps", "Deployment" | "DaemonSet" | "ReplicaSet" | "StatefulSet") => {
                t.add_atomic(&["spec.selector"]);
                t.add_object_meta("spec.template.metadata");
                t.add_pod_spec("spec.template.spec");
                t.insert("status.conditions", ListType::map(["type"]));
                t.add_present(&[
                    "spec",
                    "status",
                    "spec.template",
                    "spec.template.metadata",
                    "spec.template.spec",
                ]);
                match kind {
                    "Deployment" => t.add_present(&["spec.strategy"]),
                    "DaemonSet" | "StatefulSet" => t.add_present(&["spec.updateStrategy"]),
                    _ => &mut t,
                };
            }
            ("policy", "PodDisruptionBudget") => {
                t.insert("status.conditions", ListType::map(["type"]));
                t.add_atomic(&["spec.selector"]);
                t.add_present(&["spec", "status"]);
            }
            ("", "Namespace") => {
                t.insert("status.conditions", ListType::map(["type"]));
                t.add_present(&["spec", "status"]);
            }
            ("", "ServiceAccount") => {
                t.insert("secrets", ListType::map(["name"]));
                t.add_atomic(&["secrets"]);
            }
            ("", "Event") => {
                t.add_present(&["involvedObject", "source"]);
                t.add_atomic(&["involvedObject", "related"]);
            }
            ("events.k8s.io", "Event") => {
                t.add_present(&["regarding", "deprecatedSource"]);
                t.add_atomic(&["regarding", "related"]);
            }
            ("coordination.k8s.io", "Lease") => {
                t.add_present(&["spec"]);
            }
            ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
                t.add_present(&["roleRef"]);
                t.add_atomic(&["roleRef"]);
            }
            ("", "ConfigMap" | "Secret")
            | ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => {}
            _ => return None,
        }
        Some(t)
    }

    /// Collects `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` and
    /// `x-kubernetes-map-type: atomic` from a structural `openAPIV3Schema`, for custom resources. Lists under
    /// `additionalProperties` are skipped: their path has no fixed name.
    pub fn from_openapi_schema(schema: &Value) -> Self {
        let mut t = Self::metadata_only();
        let mut path = Vec::new();
        collect_schema_lists(schema, &mut path, &mut t);
        t.shape = Some(Shape::of(schema, false));
        t
    }

    /// Declares the objects at these dotted paths always present (see
    /// [`MergeKeys::always_present`]).
    fn add_present(&mut self, paths: &[&str]) -> &mut Self {
        self.present.extend(paths.iter().map(|p| p.to_string()));
        self
    }

    /// Declares the object at the dotted `path` atomic (see [`MergeKeys::atomic`]).
    pub fn insert_atomic(&mut self, path: &str) -> &mut Self {
        let last = path.rsplit('.').next().unwrap_or(path);
        self.atomic_last.insert(last.to_string());
        self.atomic.insert(path.to_string());
        self
    }

    fn add_atomic(&mut self, paths: &[&str]) -> &mut Self {
        for p in paths {
            self.insert_atomic(p);
        }
        self
    }

    fn add_object_meta(&mut self, prefix: &str) {
        self.insert(format!("{prefix}.ownerReferences"), ListType::map(["uid"]))
            .insert(format!("{prefix}.finalizers"), ListType::Set);
        // Each owner reference is an atomic struct.
        self.add_atomic(&[&format!("{prefix}.ownerReferences")]);
    }

    fn add_pod_spec(&mut self, p: &str) {
        // The atomic structs and maps of a PodSpec outside atomic lists (whose
        // contents are never looked into).
        for a in [
            "nodeSelector",
            "imagePullSecrets",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            "topologySpreadConstraints.labelSelector",
            "volumes.iscsi.secretRef",
            "volumes.cinder.secretRef",
            "volumes.rbd.secretRef",
            "volumes.cephfs.secretRef",
            "volumes.flexVolume.secretRef",
            "volumes.scaleIO.secretRef",
            "volumes.storageos.secretRef",
            "volumes.csi.nodePublishSecretRef",
            "volumes.ephemeral.volumeClaimTemplate.spec.selector",
            "volumes.ephemeral.volumeClaimTemplate.spec.dataSource",
        ] {
            self.add_atomic(&[&format!("{p}.{a}")]);
        }
        for c in ["containers", "initContainers", "ephemeralContainers"] {
            for r in [
                "fieldRef",
                "resourceFieldRef",
                "configMapKeyRef",
                "secretKeyRef",
                "fileKeyRef",
            ] {
                self.add_atomic(&[&format!("{p}.{c}.env.valueFrom.{r}")]);
            }
            self.insert(format!("{p}.{c}"), ListType::map(["name"]))
                .insert(format!("{p}.{c}.env"), ListType::map(["name"]))
                .insert(
                    format!("{p}.{c}.ports"),
                    ListType::map(["containerPort", "protocol"]),
                )
                .insert(
                    format!("{p}.{c}.volumeMounts"),
                    ListType::map(["mountPath"]),
                )
                .insert(
                    format!("{p}.{c}.volumeDevices"),
                    ListType::map(["devicePath"]),
                );
        }
        self.insert(format!("{p}.volumes"), ListType::map(["name"]))
            .insert(format!("{p}.imagePullSecrets"), ListType::map(["name"]))
            .insert(format!("{p}.hostAliases"), ListType::map(["ip"]))
            .insert(
                format!("{p}.topologySpreadConstraints"),
                ListType::map(["topologyKey", "whenUnsatisfiable"]),
            )
            .insert(format!("{p}.schedulingGates"), ListType::map(["name"]))
            .insert(format!("{p}.resourceClaims"), ListType::map(["name"]));
    }
}

fn collect_schema_lists(schema: &Value, path: &mut Vec<String>, t: &mut MergeKeyTable) {
    // An object one value; the root and `metadata` keep their fixed semantics.
    if schema.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
        && path.first().is_some_and(|f| f != "metadata")
    {
        t.add_atomic(&[&path.join(".")]);
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            path.push(name.clone());
            collect_schema_lists(sub, path, t);
            path.pop();
        }
    }
    if schema.get("type").and_then(Value::as_str) == Some("array") {
        let declared = match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => Some(ListType::Set),
            Some("map") => {
                let keys: Vec<String> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|ks| {
                        ks.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                (!keys.is_empty()).then_some(ListType::Map(keys))
            }
            _ => None,
        };
        if let Some(lt) = declared {
            t.insert(path.join("."), lt);
        }
        if let Some(items) = schema.get("items") {
            collect_schema_lists(items, path, t);
        }
    }
}

/// A patch could not be applied; the server answers these with 4xx.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PatchError {
    /// The body is not a valid RFC 6902 document.
    #[error("invalid JSON patch: {0}")]
    InvalidJsonPatch(String),
    /// One operation failed; `index` counts from 0 as in the document.
    #[error("JSON patch operation {index} ({op} {path}) failed: {reason}")]
    JsonPatchFailed {
        index: usize,
        op: String,
        path: String,
        reason: String,
    },
    /// A merge or strategic merge patch body is not a JSON object.
    #[error("patch body must be a JSON object, got {0}")]
    NotAnObject(String),
    /// A strategic merge patch directive is malformed.
    #[error("invalid strategic merge patch at {path}: {message}")]
    Directive { path: String, message: String },
    /// A list element lacks the list's merge key.
    #[error("map: {element} does not contain declared merge key: {key} (at {path})")]
    MissingMergeKey {
        path: String,
        key: String,
        element: String,
    },
}

/// The PATCH content types upstream accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

impl PatchType {
    /// Maps a `Content-Type` (parameters ignored) to a patch type.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json-patch+json",
            Self::Merge => "application/merge-patch+json",
            Self::StrategicMerge => "application/strategic-merge-patch+json",
            Self::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Applies an RFC 7386 JSON merge patch: objects merge, `null` deletes,
/// everything else (lists included) replaces.
pub fn merge_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    merge_patch_owned(doc.clone(), patch)
}

fn merge_patch_owned(mut doc: Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::NotAnObject(kind_of(patch).into()));
    }
    json_patch::merge(&mut doc, patch);
    Ok(doc)
}

/// Applies an RFC 6902 JSON patch (`test` included) atomically: on error the
/// input is untouched and the failing operation is named.
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    json_patch_owned(doc.clone(), patch)
}

fn json_patch_owned(mut out: Value, patch: &Value) -> Result<Value, PatchError> {
    // Read from the value in place: a clone of the whole patch first was most of this step.
    let ops = <json_patch::Patch as serde::Deserialize>::deserialize(patch)
        .map_err(|e| PatchError::InvalidJsonPatch(e.to_string()))?;
    json_patch::patch(&mut out, &ops).map_err(|e| {
        let op = ops
            .0
            .get(e.operation)
            .map(op_name)
            .unwrap_or("?")
            .to_string();
        PatchError::JsonPatchFailed {
            index: e.operation,
            op,
            path: e.path.to_string(),
            reason: e.kind.to_string(),
        }
    })?;
    Ok(out)
}

fn op_name(op: &json_patch::PatchOperation) -> &'static str {
    use json_patch::PatchOperation as P;
    match op {
        P::Add(_) => "add",
        P::Remove(_) => "remove",
        P::Replace(_) => "replace",
        P::Move(_) => "move",
        P::Copy(_) => "copy",
        P::Test(_) => "test",
    }
}

/// Applies a JSON, merge or strategic merge patch by type. Apply patches go
/// through [`crate::apply::apply`] instead and are rejected here. It takes the document by
/// value and patches it in place: a server's write path holds its own copy already.
pub fn apply_patch(
    doc: Value,
    patch_type: PatchType,
    patch: &Value,
    keys: &dyn MergeKeys,
) -> Result<Value, PatchError> {
    match patch_type {
        PatchType::Json => json_patch_owned(doc, patch),
        PatchType::Merge => merge_patch_owned(doc, patch),
        PatchType::StrategicMerge => strategic_merge_patch_owned(doc, patch, keys),
        PatchType::Apply => Err(PatchError::Directive {
            path: String::new(),
            message: "apply patches are handled by server-side apply".into(),
        }),
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";
const SET_ORDER: &str = "$setElementOrder/";

/// Applies a strategic merge patch with upstream semantics:
///
/// * maps merge recursively and `null` deletes a key;
/// * lists declared [`ListType::Map`] merge element-wise by their first key,
///   [`ListType::Set`] lists union, other lists are replaced;
/// * `$patch: replace | delete | merge`, `$retainKeys`,
///   `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are
///   honoured and never reach the result.
pub fn strategic_merge_patch(
    doc: &Value,
    patch: &Value,
    keys: &dyn MergeKeys,
) -> Result<Value, PatchError> {
    strategic_merge_patch_owned(doc.clone(), patch, keys)
}

fn strategic_merge_patch_owned(
    doc: Value,
    patch: &Value,
    keys: &dyn MergeKeys,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::NotAnObject(kind_of(patch).into()));
    };
    let original = match doc {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut path = Vec::new();
    let merged = merge_map(original, patch, &mut path, keys)?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn directive_err(path: &[String], message: impl Into<String>) -> PatchError {
    PatchError::Directive {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.join(".")
        },
        message: message.into(),
    }
}

fn strs(path: &[String]) -> Vec<&str> {
    path.iter().map(String::as_str).collect()
}

/// Merges `patch` into `original`; `None` means "delete this map".
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
    keys: &dyn MergeKeys,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match patch.get(DIRECTIVE) {
        None => {}
        Some(Value::String(d)) if d == "merge" => {}
        Some(Value::String(d)) if d == "delete" => return Ok(None),
        Some(Value::String(d)) if d == "replace" => {
            let mut stripped = patch.clone();
            stripped.remove(DIRECTIVE);
            return merge_map(Map::new(), &stripped, path, keys);
        }
        Some(other) => {
            return Err(directive_err(
                path,
                format!("unknown patch type {other} for $patch"),
            ));
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let retain = retain
            .as_array()
            .ok_or_else(|| directive_err(path, "$retainKeys must be a list of field names"))?;
        let names: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        original.retain(|k, _| names.contains(&k.as_str()));
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE) {
            let doomed = v.as_array().ok_or_else(|| {
                directive_err(path, format!("{k} must be a list of values to delete"))
            })?;
            if let Some(Value::Array(items)) = original.get_mut(field) {
                items.retain(|i| !doomed.contains(i));
            }
        }
    }
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        path.push(k.clone());
        // Taken in place (not removed) so the key keeps its position.
        let current = original.get_mut(k).map(std::mem::take);
        let merged = match (current, v) {
            (_, Value::Null) => None,
            (Some(Value::Object(o)), Value::Object(p)) => {
                merge_map(o, p, path, keys)?.map(Value::Object)
            }
            (Some(Value::Array(o)), Value::Array(p)) => {
                Some(Value::Array(merge_list(o, p, path, keys)?))
            }
            (_, Value::Object(p)) => merge_map(Map::new(), p, path, keys)?.map(Value::Object),
            (_, Value::Array(p)) => Some(Value::Array(merge_list(Vec::new(), p, path, keys)?)),
            (_, scalar) => Some(scalar.clone()),
        };
        path.pop();
        match merged {
            Some(m) => {
                original.insert(k.clone(), m);
            }
            None => {
                original.shift_remove(k);
            }
        }
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(SET_ORDER) {
            let order = v
                .as_array()
                .ok_or_else(|| directive_err(path, format!("{k} must be a list")))?;
            path.push(field.to_string());
            let list_type = resolve_list_type(keys, &strs(path));
            path.pop();
            if let Some(Value::Array(items)) = original.get_mut(field) {
                reorder(items, order, &list_type);
            }
        }
    }
    Ok(Some(original))
}

fn is_replace_marker(v: &Value) -> bool {
    v.get(DIRECTIVE).and_then(Value::as_str) == Some("replace")
}

fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    path: &mut Vec<String>,
    keys: &dyn MergeKeys,
) -> Result<Vec<Value>, PatchError> {
    let list_type = resolve_list_type(keys, &strs(path));
    if patch.iter().any(is_replace_marker) {
        let rest: Vec<Value> = patch
            .iter()
            .filter(|v| !is_replace_marker(v))
            .cloned()
            .collect();
        return merge_list(Vec::new(), &rest, path, keys);
    }
    match list_type {
        ListType::Atomic => Ok(patch.to_vec()),
        ListType::Set => {
            let mut out = original;
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(out)
        }
        ListType::Map(map_keys) => {
            let key = map_keys[0].as_str();
            let mut out = original;
            for elem in patch {
                let Value::Object(p) = elem else {
                    return Err(directive_err(path, "expected list elements to be objects"));
                };
                let Some(kv) = p.get(key) else {
                    return Err(PatchError::MissingMergeKey {
                        path: path.join("."),
                        key: key.to_string(),
                        element: elem.to_string(),
                    });
                };
                let pos = out.iter().position(|o| o.get(key) == Some(kv));
                if p.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                    out.retain(|o| o.get(key) != Some(kv));
                    continue;
                }
                match pos {
                    Some(i) => {
                        let current = match std::mem::take(&mut out[i]) {
                            Value::Object(m) => m,
                            _ => Map::new(),
                        };
                        match merge_map(current, p, path, keys)? {
                            Some(m) => out[i] = Value::Object(m),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    None => {
                        if let Some(m) = merge_map(Map::new(), p, path, keys)? {
                            out.push(Value::Object(m));
                        }
                    }
                }
            }
            Ok(out)
        }
    }
}

/// `$setElementOrder`: the listed elements take the slots they already
/// occupy, in the listed order; unlisted elements stay where they are.
fn reorder(items: &mut [Value], order: &[Value], list_type: &ListType) {
    let identity = |v: &Value| -> Option<Value> {
        match list_type {
            ListType::Map(keys) => v.get(&keys[0]).cloned(),
            _ => Some(v.clone()),
        }
    };
    let wanted: Vec<Value> = order.iter().filter_map(identity).collect();
    let rank = |v: &Value| identity(v).and_then(|id| wanted.iter().position(|w| *w == id));
    let slots: Vec<usize> = (0..items.len())
        .filter(|&i| rank(&items[i]).is_some())
        .collect();
    let mut listed: Vec<Value> = slots.iter().map(|&i| items[i].clone()).collect();
    listed.sort_by_key(|v| rank(v).unwrap_or(usize::MAX));
    for (slot, v) in slots.into_iter().zip(listed) {
        items[slot] = v;
    }
}

/// True when a write changed nothing but bookkeeping, so the server keeps
/// `resourceVersion` (kubectl reports `patched (no change)` from that).
pub fn is_noop(before: &Value, after: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
            meta.remove("generation");
        }
        v
    }
    strip(before) == strip(after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;
    use serde_json::json;

    fn node_keys() -> MergeKeyTable {
        MergeKeyTable::builtin("", "Node").unwrap()
    }

    fn smp(doc: Value, patch: Value, kind: (&str, &str)) -> Value {
        let keys = MergeKeyTable::builtin(kind.0, kind.1).unwrap();
        strategic_merge_patch(&doc, &patch, &keys).unwrap()
    }

    fn node() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "worker-0", "labels": {"a": "1"}, "resourceVersion": "5",
                         "finalizers": ["x", "y"]},
            "spec": {"podCIDRs": ["10.0.0.0/24"]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "MemoryPressure", "status": "False"}
            ]}
        })
    }

    #[test]
    fn kubectl_label_and_unlabel_merge_patch() {
        let labeled = merge_patch(&node(), &json!({"metadata":{"labels":{"foo":"bar"}}})).unwrap();
        assert_eq!(labeled["metadata"]["labels"], json!({"a":"1","foo":"bar"}));
        let unlabeled =
            merge_patch(&labeled, &json!({"metadata":{"labels":{"foo":null}}})).unwrap();
        assert_eq!(unlabeled["metadata"]["labels"], json!({"a":"1"}));
        // Re-labelling with the same value sends `{}`: a no-op.
        let same = merge_patch(&labeled, &json!({})).unwrap();
        assert!(is_noop(&labeled, &same));
    }

    #[test]
    fn merge_patch_replaces_lists_and_rejects_non_objects() {
        let doc = json!({"spec":{"kernelArguments":["nosmt"],"paused":false}});
        let out = merge_patch(
            &doc,
            &json!({"spec":{"kernelArguments":["nosmt","mitigations=off"]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["kernelArguments"],
            json!(["nosmt", "mitigations=off"])
        );
        assert_eq!(out["spec"]["paused"], json!(false));
        assert!(matches!(
            merge_patch(&doc, &json!([1])),
            Err(PatchError::NotAnObject(_))
        ));
    }

    #[test]
    fn kubectl_cordon_and_uncordon() {
        let cordoned = smp(node(), json!({"spec":{"unschedulable":true}}), ("", "Node"));
        assert_eq!(
            cordoned["spec"],
            json!({"podCIDRs":["10.0.0.0/24"],"unschedulable":true})
        );
        let uncordoned = smp(
            cordoned,
            json!({"spec":{"unschedulable":null}}),
            ("", "Node"),
        );
        assert_eq!(uncordoned["spec"], json!({"podCIDRs":["10.0.0.0/24"]}));
        assert!(is_noop(&node(), &uncordoned));
    }

    #[test]
    fn kubectl_annotate_and_label_via_smp() {
        let out = smp(
            node(),
            json!({"metadata":{"annotations":{"note":"hi"},"labels":{"x":"y","a":null}}}),
            ("", "Node"),
        );
        assert_eq!(out["metadata"]["annotations"], json!({"note":"hi"}));
        assert_eq!(out["metadata"]["labels"], json!({"x":"y"}));
    }

    #[test]
    fn conditions_merge_by_type() {
        let out = smp(
            node(),
            json!({"status":{"conditions":[
                {"type":"Ready","status":"False","reason":null},
                {"type":"DiskPressure","status":"False"}
            ]}}),
            ("", "Node"),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([
                {"type":"Ready","status":"False"},
                {"type":"MemoryPressure","status":"False"},
                {"type":"DiskPressure","status":"False"}
            ])
        );
    }

    #[test]
    fn directives_table() {
        let keys = node_keys();
        let cases: Vec<(&str, Value, Value, Value)> = vec![
            (
                "$patch: delete on a list element removes it by key",
                node(),
                json!({"status":{"conditions":[{"type":"Ready","$patch":"delete"}]}}),
                json!([{"type":"MemoryPressure","status":"False"}]),
            ),
            (
                "$patch: replace element replaces a keyed list",
                node(),
                json!({"status":{"conditions":[{"$patch":"replace"},{"type":"X","status":"True"}]}}),
                json!([{"type":"X","status":"True"}]),
            ),
            (
                "$patch: replace on a map replaces it",
                json!({"status":{"conditions":[], "nodeInfo":{"a":1,"b":2}}}),
                json!({"status":{"nodeInfo":{"$patch":"replace","c":3}}}),
                json!({"c":3}),
            ),
            (
                "$patch: delete on a map removes it",
                json!({"status":{"nodeInfo":{"a":1}}}),
                json!({"status":{"nodeInfo":{"$patch":"delete"}}}),
                Value::Null,
            ),
            (
                "$patch: merge is the default",
                json!({"status":{"nodeInfo":{"a":1}}}),
                json!({"status":{"nodeInfo":{"$patch":"merge","b":2}}}),
                json!({"a":1,"b":2}),
            ),
        ];
        for (name, doc, patch, want) in cases {
            let out = strategic_merge_patch(&doc, &patch, &keys).unwrap();
            let got = if name.contains("conditions") || name.contains("list") {
                out["status"]["conditions"].clone()
            } else {
                out["status"]
                    .get("nodeInfo")
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn primitive_set_lists() {
        let out = smp(
            node(),
            json!({"metadata":{"finalizers":["y","z"],"$deleteFromPrimitiveList/finalizers":["x"]}}),
            ("", "Node"),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["y", "z"]));
        let ordered = smp(
            out,
            json!({"metadata":{"$setElementOrder/finalizers":["z","y"]}}),
            ("", "Node"),
        );
        assert_eq!(ordered["metadata"]["finalizers"], json!(["z", "y"]));
    }

    #[test]
    fn kubectl_taint_removal_replaces_the_list() {
        let mut doc = node();
        doc["spec"]["taints"] = json!([
            {"key": "a", "effect": "NoSchedule"},
            {"key": "b", "effect": "NoExecute"}
        ]);
        let out = smp(
            doc,
            json!({"spec":{"taints":[{"key":"b","effect":"NoExecute"}]}}),
            ("", "Node"),
        );
        assert_eq!(
            out["spec"]["taints"],
            json!([{"key":"b","effect":"NoExecute"}])
        );
    }

    #[test]
    fn lists_without_merge_key_replace() {
        let doc = json!({"spec":{"kernelArguments":["a"]},"status":{"images":[{"names":["i"]}]}});
        let out = strategic_merge_patch(
            &doc,
            &json!({"status":{"images":[{"names":["j"]}]}}),
            &node_keys(),
        )
        .unwrap();
        assert_eq!(out["status"]["images"], json!([{"names":["j"]}]));
    }

    #[test]
    fn kubectl_apply_deployment_patch_with_set_element_order_and_retain_keys() {
        let live = json!({
            "apiVersion":"apps/v1","kind":"Deployment",
            "metadata":{"name":"web","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"old"}},
            "spec":{
                "strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"}},
                "template":{"spec":{
                    "containers":[
                        {"name":"sidecar","image":"s:1"},
                        {"name":"nginx","image":"nginx:1.24","env":[{"name":"A","value":"1"},{"name":"B","value":"2"}]}
                    ],
                    "volumes":[{"name":"data","emptyDir":{}}]
                }}
            }
        });
        // The shape kubectl apply sends for a strategy switch, an image bump,
        // a container reorder and a volume source change.
        let patch = json!({
            "metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"new"}},
            "spec":{
                "strategy":{"$retainKeys":["type"],"rollingUpdate":null,"type":"Recreate"},
                "template":{"spec":{
                    "$setElementOrder/containers":[{"name":"nginx"},{"name":"sidecar"}],
                    "containers":[{"$setElementOrder/env":[{"name":"B"},{"name":"A"}],"image":"nginx:1.25","name":"nginx"}],
                    "volumes":[{"$retainKeys":["hostPath","name"],"emptyDir":null,"hostPath":{"path":"/data"},"name":"data"}]
                }}
            }
        });
        let out = smp(live, patch, ("apps", "Deployment"));
        assert_eq!(
            out["spec"],
            json!({
                "strategy":{"type":"Recreate"},
                "template":{"spec":{
                    "containers":[
                        {"name":"nginx","image":"nginx:1.25","env":[{"name":"B","value":"2"},{"name":"A","value":"1"}]},
                        {"name":"sidecar","image":"s:1"}
                    ],
                    "volumes":[{"name":"data","hostPath":{"path":"/data"}}]
                }}
            })
        );
        assert_eq!(
            out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            json!("new")
        );
    }

    #[test]
    fn set_element_order_places_new_items() {
        let live = json!({"spec":{"template":{"spec":{"containers":[
            {"name":"a","image":"a"},{"name":"b","image":"b"}
        ]}}}});
        let out = smp(
            live,
            json!({"spec":{"template":{"spec":{
                "$setElementOrder/containers":[{"name":"a"},{"name":"new"},{"name":"b"}],
                "containers":[{"name":"new","image":"n"}]
            }}}}),
            ("apps", "DaemonSet"),
        );
        let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["a", "new", "b"]);
    }

    #[test]
    fn kubectl_apply_configmap_patch() {
        let live = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"demo"},"data":{"a":"3","b":"x"}});
        let out = smp(
            live,
            json!({"data":{"a":"4","b":null},"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}}}),
            ("", "ConfigMap"),
        );
        assert_eq!(out["data"], json!({"a":"4"}));
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let doc =
            json!({"metadata":{"ownerReferences":[{"uid":"1","name":"a"},{"uid":"2","name":"b"}]}});
        let out = smp(
            doc,
            json!({"metadata":{"ownerReferences":[{"uid":"2","controller":true},{"uid":"3","name":"c"}]}}),
            ("", "Pod"),
        );
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid":"1","name":"a"},{"uid":"2","name":"b","controller":true},{"uid":"3","name":"c"}])
        );
    }

    #[test]
    fn pod_container_ports_merge_by_container_port() {
        let doc = json!({"spec":{"containers":[{"name":"c","ports":[{"containerPort":80,"name":"http"}]}]}});
        let out = smp(
            doc,
            json!({"spec":{"containers":[{"name":"c","ports":[{"containerPort":80,"protocol":"TCP"},{"containerPort":443}]}]}}),
            ("", "Pod"),
        );
        assert_eq!(
            out["spec"]["containers"][0]["ports"],
            json!([{"containerPort":80,"name":"http","protocol":"TCP"},{"containerPort":443}])
        );
    }

    #[test]
    fn smp_errors() {
        let keys = node_keys();
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"status":{"conditions":[{"status":"True"}]}}),
                "does not contain declared merge key: type",
            ),
            (json!({"spec":{"$patch":"explode"}}), "unknown patch type"),
            (json!({"spec":{"$retainKeys":"x"}}), "$retainKeys"),
            (
                json!({"metadata":{"$deleteFromPrimitiveList/finalizers":"x"}}),
                "deleteFromPrimitiveList",
            ),
            (json!([]), "must be a JSON object"),
        ];
        for (patch, needle) in cases {
            let err = strategic_merge_patch(&node(), &patch, &keys)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{patch} -> {err}");
        }
    }

    #[test]
    fn json_patch_ops_and_errors() {
        let doc = json!({"spec":{"paused":true,"list":[1,2]}});
        let out = json_patch(
            &doc,
            &json!([
                {"op":"test","path":"/spec/paused","value":true},
                {"op":"replace","path":"/spec/paused","value":false},
                {"op":"add","path":"/spec/list/-","value":3},
                {"op":"remove","path":"/spec/list/0"},
                {"op":"copy","from":"/spec/paused","path":"/spec/copy"},
                {"op":"move","from":"/spec/copy","path":"/spec/moved"}
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"spec":{"paused":false,"list":[2,3],"moved":false}})
        );

        let err = json_patch(
            &doc,
            &json!([
                {"op":"replace","path":"/spec/paused","value":false},
                {"op":"test","path":"/spec/paused","value":true}
            ]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::JsonPatchFailed {
                index: 1,
                op: "test".into(),
                path: "/spec/paused".into(),
                reason: "value did not match".into()
            }
        );
        let missing = json_patch(&doc, &json!([{"op":"remove","path":"/nope"}])).unwrap_err();
        assert!(
            missing.to_string().contains("operation 0 (remove /nope)"),
            "{missing}"
        );
        assert!(matches!(
            json_patch(&doc, &json!([{"op":"frobnicate","path":"/a"}])),
            Err(PatchError::InvalidJsonPatch(_))
        ));
    }

    #[test]
    fn patch_type_dispatch() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(PatchType::from_content_type("text/plain"), None);
        let keys = MergeKeyTable::metadata_only();
        let out = apply_patch(
            json!({"a":1}),
            PatchType::Json,
            &json!([{"op":"add","path":"/b","value":2}]),
            &keys,
        )
        .unwrap();
        assert_eq!(out, json!({"a":1,"b":2}));
        assert!(apply_patch(json!({}), PatchType::Apply, &json!({}), &keys).is_err());
    }

    #[test]
    fn builtin_tables_cover_core_kinds() {
        for (g, k) in [
            ("", "Node"),
            ("", "Pod"),
            ("", "ConfigMap"),
            ("", "Secret"),
            ("", "Event"),
            ("", "Namespace"),
            ("", "ServiceAccount"),
            ("coordination.k8s.io", "Lease"),
            ("policy", "PodDisruptionBudget"),
            ("apps", "DaemonSet"),
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("events.k8s.io", "Event"),
        ] {
            let t = MergeKeyTable::builtin(g, k).unwrap_or_else(|| panic!("{g}/{k}"));
            assert_eq!(t.list_type(&["metadata", "finalizers"]), ListType::Set);
        }
        assert!(
            MergeKeyTable::builtin("machineconfiguration.openshift.io", "MachineConfig").is_none()
        );
        let d = MergeKeyTable::builtin("apps", "Deployment").unwrap();
        assert_eq!(
            d.list_type(&["spec", "template", "spec", "containers", "env"]),
            ListType::map(["name"])
        );
        assert_eq!(
            d.list_type(&["spec", "template", "spec", "tolerations"]),
            ListType::Atomic
        );
    }

    #[test]
    fn schema_list_types() {
        let schema = json!({"type":"object","properties":{
            "status":{"type":"object","properties":{
                "conditions":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["type"],
                    "items":{"type":"object","properties":{"tags":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}}}}},
                "atomic":{"type":"array","x-kubernetes-list-type":"atomic"}
            }}
        }});
        let t = MergeKeyTable::from_openapi_schema(&schema);
        assert_eq!(t.get("status.conditions"), Some(&ListType::map(["type"])));
        assert_eq!(t.get("status.conditions.tags"), Some(&ListType::Set));
        assert_eq!(t.get("status.atomic"), None);
    }

    #[test]
    fn closure_lookup() {
        let keys = |p: &[&str]| {
            if p == ["items"] {
                ListType::map(["id"])
            } else {
                ListType::Atomic
            }
        };
        let out = strategic_merge_patch(
            &json!({"items":[{"id":1,"v":1}]}),
            &json!({"items":[{"id":1,"w":2}]}),
            &keys,
        )
        .unwrap();
        assert_eq!(out, json!({"items":[{"id":1,"v":1,"w":2}]}));
    }

    #[test]
    fn keyless_map_declaration_is_atomic() {
        let keys = |_: &[&str]| ListType::Map(Vec::new());
        let out = strategic_merge_patch(
            &json!({"items":[{"id":1}]}),
            &json!({"items":[{"id":2}]}),
            &keys,
        )
        .unwrap();
        assert_eq!(out, json!({"items":[{"id":2}]}));
    }

    #[test]
    fn noop_ignores_bookkeeping() {
        let a = json!({"metadata":{"name":"n","resourceVersion":"1","generation":1,"managedFields":[]},"spec":{}});
        let b = json!({"metadata":{"name":"n","resourceVersion":"2"},"spec":{}});
        assert!(is_noop(&a, &b));
        let c = json!({"metadata":{"name":"n"},"spec":{"x":1}});
        assert!(!is_noop(&a, &c));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|i| json!(i)),
            "[a-z]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map("[a-c]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn json_object() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map("[a-d]", json_value(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        #[test]
        fn merge_patch_with_itself_is_noop(doc in json_object()) {
            prop_assert_eq!(merge_patch(&doc, &doc).unwrap(), doc);
        }

        #[test]
        fn smp_with_itself_is_noop_without_keyed_lists(doc in json_object()) {
            let keys = MergeKeyTable::new();
            prop_assert_eq!(strategic_merge_patch(&doc, &doc, &keys).unwrap(), doc);
        }

        #[test]
        fn smp_equals_merge_patch_without_directives_or_keys(doc in json_object(), patch in json_object()) {
            let keys = MergeKeyTable::new();
            prop_assert_eq!(
                strategic_merge_patch(&doc, &patch, &keys).unwrap(),
                merge_patch(&doc, &patch).unwrap()
            );
        }

        #[test]
        fn empty_patches_are_noops(doc in json_object()) {
            let empty_merge = merge_patch(&doc, &Value::Object(Map::new())).unwrap();
            let empty_json = json_patch(&doc, &Value::Array(Vec::new())).unwrap();
            prop_assert!(is_noop(&doc, &empty_merge));
            prop_assert!(is_noop(&doc, &empty_json));
        }
    }
}
