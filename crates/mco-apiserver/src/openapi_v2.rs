//! `GET /openapi/v2`: the Swagger 2.0 document, as JSON or as gnostic's `openapi_v2.Document`
//! protobuf message.
//!
//! kubectl validates a `kind: List` client-side against this document (the server-side
//! `fieldValidation` path covers single objects only): each item's `apiVersion` and `kind`
//! pick the definition whose `x-kubernetes-group-version-kind` names them, and an item whose
//! kind has no definition is not checked. kubectl asks for protobuf and parses the body as
//! protobuf whatever its content type, so JSON is served only to a client that asks for it.
//!
//! The document is derived from the server's own OpenAPI v3 documents, converting each
//! custom resource's schema as kube-apiserver publishes a CRD at v2: what v2 cannot say is
//! dropped or loosened (`allOf`/`anyOf`/`oneOf`/`not` and defaults are dropped; a nullable
//! field loses its type and fields and is not required; a field that keeps unknown fields
//! loses its fields), so kubectl never refuses what the server accepts. Built-in kinds are
//! served here without detailed schemas: they get no definition, which leaves kubectl to its
//! compiled-in types, as for a kind it does not know. Kubectl 1.27 and 1.28 also read the
//! `patch` operations' `fieldValidation` parameter here to validate single objects
//! server-side, so every operation of the v3 documents is listed too.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use mco_apimachinery::openapi::{OpenApiV3, builtin_resources};
use prost::Message;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

/// The content type of the protobuf document, as kube-apiserver answers.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The subtypes that select protobuf: kubectl sends the first, kube-apiserver answers the second.
const PROTOBUF_SUBTYPES: [&str; 2] = [
    "com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "com.github.proto-openapi.spec.v2.v1.0+protobuf",
];

const DEFINITION_PREFIX: &str = "#/definitions/";
const V3_PREFIX: &str = "#/components/schemas/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The served document in both encodings, with the validator kube-apiserver gives it.
#[derive(Debug)]
pub struct Document {
    pub json: Bytes,
    pub protobuf: Bytes,
    /// Quoted upper-case hex SHA-512 of the JSON, as kube-apiserver's `ETag`; the same for
    /// both encodings.
    pub etag: String,
    /// When this document was built, as an HTTP date.
    pub last_modified: String,
}

/// The v2 document for `v3`: built once per build of the v3 documents (that is, once per
/// change of the served resources), as `discovery::openapi` returns the same `Arc` until then.
pub fn document(v3: &Arc<OpenApiV3>) -> Arc<Document> {
    // Keyed by the v3 build; a dead key's entry goes at the next call. Several servers in one
    // process (tests) each keep their own entry.
    static CACHE: Mutex<Vec<(Weak<OpenApiV3>, Arc<Document>)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|(k, _)| k.strong_count() > 0);
    if let Some((_, d)) = cache
        .iter()
        .find(|(k, _)| std::ptr::eq(k.as_ptr(), Arc::as_ptr(v3)))
    {
        return d.clone();
    }
    let d = Arc::new(build(v3));
    cache.push((Arc::downgrade(v3), d.clone()));
    d
}

/// Builds both encodings of the v2 document of `v3`.
pub fn build(v3: &OpenApiV3) -> Document {
    let doc = swagger(v3);
    let json = serde_json::to_vec(&doc).unwrap_or_default();
    let hex: String = Sha512::digest(&json)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let etag = format!("\"{hex}\"");
    let protobuf = pb::document(&doc).encode_to_vec();
    let last_modified = jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&jiff::Timestamp::now())
        .unwrap_or_default();
    Document {
        json: json.into(),
        protobuf: protobuf.into(),
        etag,
        last_modified,
    }
}

/// Which encoding an `Accept` header selects, as kube-apiserver negotiates: clauses by
/// quality (then the more specific first), JSON before protobuf for a wildcard; `None` when
/// nothing acceptable is served (406).
pub fn negotiate(accept: &str) -> Option<Encoding> {
    let accept = if accept.trim().is_empty() {
        "*/*"
    } else {
        accept
    };
    let mut clauses: Vec<(f64, &str, &str)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let (t, s) = parts.next()?.trim().split_once('/')?;
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            Some((q, t.trim(), s.trim()))
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then((a.2 == "*").cmp(&(b.2 == "*")))
            .then((a.1 == "*").cmp(&(b.1 == "*")))
    });
    clauses.into_iter().find_map(|(_, t, s)| {
        if t != "application" && t != "*" {
            return None;
        }
        if s == "json" || s == "*" {
            Some(Encoding::Json)
        } else if PROTOBUF_SUBTYPES.contains(&s) {
            Some(Encoding::Protobuf)
        } else {
            None
        }
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Protobuf,
}

/// Whether an `If-None-Match` header names `etag` (or is `*`), weakly compared.
pub fn not_modified(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|t| {
        t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag.strip_prefix("W/").unwrap_or(etag)
    })
}

/// The Swagger 2.0 document of `v3`, as served at `/openapi/v2` in JSON.
pub fn swagger(v3: &OpenApiV3) -> Value {
    let builtin: HashSet<(String, String, String)> = builtin_resources()
        .into_iter()
        .flat_map(|r| {
            let list = format!("{}List", r.kind);
            [
                (r.group.clone(), r.version.clone(), r.kind),
                (r.group, r.version, list),
            ]
        })
        .collect();
    let mut definitions = BTreeMap::new();
    let mut paths = BTreeMap::new();
    for key in v3.keys() {
        let Some(doc) = v3.document(key) else {
            continue;
        };
        if let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, s) in schemas {
                let gvks = s
                    .get("x-kubernetes-group-version-kind")
                    .and_then(Value::as_array);
                let definition = match gvks {
                    Some(gvks)
                        if !gvks.is_empty()
                            && gvks.iter().all(|g| builtin.contains(&gvk_key(g))) =>
                    {
                        continue;
                    }
                    Some(_) => kind_definition(s),
                    None => convert(s),
                };
                definitions.insert(name.clone(), definition);
            }
        }
        if let Some(v3_paths) = doc.get("paths").and_then(Value::as_object) {
            for (path, item) in v3_paths {
                paths.insert(path.clone(), path_item(item));
            }
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::version_info()["gitVersion"]},
        "paths": paths,
        "definitions": definitions,
    })
}

fn gvk_key(g: &Value) -> (String, String, String) {
    let s = |k: &str| g.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    (s("group"), s("version"), s("kind"))
}

fn flag(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key) == Some(&Value::Bool(true))
}

/// A kind's definition: one whose whole object keeps unknown fields is published as a bare
/// object (fields beside `apiVersion`, `kind` and `metadata` would make kubectl refuse every
/// other field), otherwise its converted schema.
pub fn kind_definition(s: &Value) -> Value {
    match s.as_object() {
        Some(m) if flag(m, "x-kubernetes-preserve-unknown-fields") => {
            let mut out = json!({"type": "object"});
            if let Some(g) = m.get("x-kubernetes-group-version-kind") {
                out["x-kubernetes-group-version-kind"] = g.clone();
            }
            out
        }
        _ => convert(s),
    }
}

/// The keys of a v3 schema that v2 keeps as they are.
const KEPT: [&str; 17] = [
    "format",
    "title",
    "description",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "enum",
];

/// One v3 schema node as v2, by kube-apiserver's rules for CRD schemas at v2.
pub fn convert(s: &Value) -> Value {
    let Some(m) = s.as_object() else {
        return json!({});
    };
    // v3 gives a reference a description by wrapping it in `allOf`; v2 puts it beside `$ref`.
    let reference = m.get("$ref").and_then(Value::as_str).or_else(|| {
        match m.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
            Some([only]) => only.get("$ref").and_then(Value::as_str),
            _ => None,
        }
    });
    if let Some(r) = reference {
        let target = r.strip_prefix(V3_PREFIX).unwrap_or(r);
        let mut out = json!({"$ref": format!("{DEFINITION_PREFIX}{target}")});
        if let Some(d) = m.get("description") {
            out["description"] = d.clone();
        }
        return out;
    }
    let nullable = flag(m, "nullable");
    let preserve = flag(m, "x-kubernetes-preserve-unknown-fields");
    // A nullable node, or one keeping unknown fields, says nothing of its fields or items.
    let shapeless = nullable || preserve;
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "type" => {
                let t = v.as_str().unwrap_or("");
                let dropped = nullable
                    || (preserve && t == "object")
                    || (t == "array" && (shapeless || !m.contains_key("items")));
                if !dropped {
                    out.insert(k.clone(), v.clone());
                }
            }
            "properties" if !shapeless => {
                let props: Map<String, Value> = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, p)| (name.clone(), convert(p)))
                    .collect();
                // An empty `properties` would make kubectl refuse every field.
                if !props.is_empty() {
                    out.insert(k.clone(), Value::Object(props));
                }
            }
            "items" if !shapeless && v.is_object() => {
                out.insert(k.clone(), convert(v));
            }
            "additionalProperties" => {
                out.insert(
                    k.clone(),
                    if v.is_object() { convert(v) } else { v.clone() },
                );
            }
            "required" => {
                let nullable_values = m
                    .get("additionalProperties")
                    .and_then(Value::as_object)
                    .is_some_and(|a| flag(a, "nullable"));
                let props = m.get("properties").and_then(Value::as_object);
                let required: Vec<Value> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|name| {
                        let nullable_field = name
                            .as_str()
                            .and_then(|n| props.and_then(|p| p.get(n)))
                            .and_then(Value::as_object)
                            .is_some_and(|p| flag(p, "nullable"));
                        !nullable_values && !nullable_field
                    })
                    .cloned()
                    .collect();
                if !required.is_empty() {
                    out.insert(k.clone(), Value::Array(required));
                }
            }
            k if KEPT.contains(&k) || k.starts_with("x-") => {
                out.insert(k.to_string(), v.clone());
            }
            // allOf, anyOf, oneOf, not, nullable, default, example: not said at v2.
            _ => {}
        }
    }
    if flag(m, "x-kubernetes-embedded-resource") && !preserve {
        embed(&mut out);
    }
    Value::Object(out)
}

/// An embedded object (`x-kubernetes-embedded-resource`) has a kind's `apiVersion`, `kind`
/// and `metadata`, and requires the first two.
fn embed(out: &mut Map<String, Value>) {
    let props = out
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(props) = props {
        props.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "apiVersion defines the versioned schema of this representation of an object."}),
        );
        props.insert(
            "kind".into(),
            json!({"type": "string", "description": "kind is a string value representing the type of this object."}),
        );
        props.insert(
            "metadata".into(),
            json!({"$ref": format!("{DEFINITION_PREFIX}{OBJECT_META}")}),
        );
    }
    let required = out.entry("required").or_insert_with(|| json!([]));
    if let Some(required) = required.as_array_mut() {
        for name in ["kind", "apiVersion"] {
            if !required.iter().any(|r| r == name) {
                required.push(json!(name));
            }
        }
    }
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// A v3 path item as v2: its operations with their query and path parameters, response codes
/// and vendor extensions.
fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    if let Some(params) = item.get("parameters").and_then(Value::as_array)
        && !params.is_empty()
    {
        out.insert(
            "parameters".into(),
            params.iter().map(parameter).collect::<Vec<_>>().into(),
        );
    }
    for method in METHODS {
        let Some(op) = item.get(method).and_then(Value::as_object) else {
            continue;
        };
        let mut o = Map::new();
        for k in ["tags", "description", "operationId"] {
            if let Some(v) = op.get(k) {
                o.insert(k.into(), v.clone());
            }
        }
        o.insert(
            "parameters".into(),
            op.get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(parameter)
                .collect::<Vec<_>>()
                .into(),
        );
        let responses: Map<String, Value> = op
            .get("responses")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(code, r)| {
                let d = r.get("description").cloned().unwrap_or(json!(""));
                (code.clone(), json!({"description": d}))
            })
            .collect();
        o.insert("responses".into(), Value::Object(responses));
        for (k, v) in op {
            if k.starts_with("x-") {
                o.insert(k.clone(), v.clone());
            }
        }
        out.insert(method.into(), Value::Object(o));
    }
    Value::Object(out)
}

/// A v3 parameter as v2: its schema's `type` and `uniqueItems` beside it.
fn parameter(p: &Value) -> Value {
    let mut out = Map::new();
    for k in ["name", "in", "description", "required"] {
        if let Some(v) = p.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    for k in ["type", "uniqueItems"] {
        if let Some(v) = p.get("schema").and_then(|s| s.get(k)) {
            out.insert(k.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// gnostic's `openapi_v2` messages (github.com/google/gnostic-models/openapiv2/OpenAPIv2.proto),
/// the fields this document uses. A `oneof` of the proto is written as optional fields of
/// which one is set, which encodes the same.
mod pb {
    use serde_json::Value;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Document {
        #[prost(string, tag = "1")]
        pub swagger: String,
        #[prost(message, optional, tag = "2")]
        pub info: Option<Info>,
        #[prost(message, optional, tag = "8")]
        pub paths: Option<Paths>,
        #[prost(message, optional, tag = "9")]
        pub definitions: Option<Definitions>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Info {
        #[prost(string, tag = "1")]
        pub title: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Paths {
        #[prost(message, repeated, tag = "2")]
        pub path: Vec<NamedPathItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedPathItem {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<PathItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PathItem {
        #[prost(message, optional, tag = "2")]
        pub get: Option<Operation>,
        #[prost(message, optional, tag = "3")]
        pub put: Option<Operation>,
        #[prost(message, optional, tag = "4")]
        pub post: Option<Operation>,
        #[prost(message, optional, tag = "5")]
        pub delete: Option<Operation>,
        #[prost(message, optional, tag = "8")]
        pub patch: Option<Operation>,
        #[prost(message, repeated, tag = "9")]
        pub parameters: Vec<ParametersItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Operation {
        #[prost(string, repeated, tag = "1")]
        pub tags: Vec<String>,
        #[prost(string, tag = "3")]
        pub description: String,
        #[prost(string, tag = "5")]
        pub operation_id: String,
        #[prost(message, repeated, tag = "8")]
        pub parameters: Vec<ParametersItem>,
        #[prost(message, optional, tag = "9")]
        pub responses: Option<Responses>,
        #[prost(message, repeated, tag = "13")]
        pub vendor_extension: Vec<NamedAny>,
    }

    /// `oneof {Parameter parameter = 1; JsonReference json_reference = 2}`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ParametersItem {
        #[prost(message, optional, tag = "1")]
        pub parameter: Option<Parameter>,
    }

    /// `oneof {BodyParameter body_parameter = 1; NonBodyParameter non_body_parameter = 2}`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Parameter {
        #[prost(message, optional, tag = "2")]
        pub non_body_parameter: Option<NonBodyParameter>,
    }

    /// `oneof {header = 1; form_data = 2; query = 3; path = 4}`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NonBodyParameter {
        #[prost(message, optional, tag = "3")]
        pub query_parameter_sub_schema: Option<QueryParameterSubSchema>,
        #[prost(message, optional, tag = "4")]
        pub path_parameter_sub_schema: Option<PathParameterSubSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct QueryParameterSubSchema {
        #[prost(bool, tag = "1")]
        pub required: bool,
        #[prost(string, tag = "2")]
        pub r#in: String,
        #[prost(string, tag = "3")]
        pub description: String,
        #[prost(string, tag = "4")]
        pub name: String,
        #[prost(string, tag = "6")]
        pub r#type: String,
        #[prost(bool, tag = "20")]
        pub unique_items: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PathParameterSubSchema {
        #[prost(bool, tag = "1")]
        pub required: bool,
        #[prost(string, tag = "2")]
        pub r#in: String,
        #[prost(string, tag = "3")]
        pub description: String,
        #[prost(string, tag = "4")]
        pub name: String,
        #[prost(string, tag = "5")]
        pub r#type: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Responses {
        #[prost(message, repeated, tag = "1")]
        pub response_code: Vec<NamedResponseValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedResponseValue {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<ResponseValue>,
    }

    /// `oneof {Response response = 1; JsonReference json_reference = 2}`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResponseValue {
        #[prost(message, optional, tag = "1")]
        pub response: Option<Response>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Response {
        #[prost(string, tag = "1")]
        pub description: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Definitions {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedSchema {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Schema {
        #[prost(string, tag = "1")]
        pub xref: String,
        #[prost(string, tag = "2")]
        pub format: String,
        #[prost(string, tag = "3")]
        pub title: String,
        #[prost(string, tag = "4")]
        pub description: String,
        #[prost(double, tag = "6")]
        pub multiple_of: f64,
        #[prost(double, tag = "7")]
        pub maximum: f64,
        #[prost(bool, tag = "8")]
        pub exclusive_maximum: bool,
        #[prost(double, tag = "9")]
        pub minimum: f64,
        #[prost(bool, tag = "10")]
        pub exclusive_minimum: bool,
        #[prost(int64, tag = "11")]
        pub max_length: i64,
        #[prost(int64, tag = "12")]
        pub min_length: i64,
        #[prost(string, tag = "13")]
        pub pattern: String,
        #[prost(int64, tag = "14")]
        pub max_items: i64,
        #[prost(int64, tag = "15")]
        pub min_items: i64,
        #[prost(bool, tag = "16")]
        pub unique_items: bool,
        #[prost(int64, tag = "17")]
        pub max_properties: i64,
        #[prost(int64, tag = "18")]
        pub min_properties: i64,
        #[prost(string, repeated, tag = "19")]
        pub required: Vec<String>,
        #[prost(message, repeated, tag = "20")]
        pub r#enum: Vec<Any>,
        #[prost(message, optional, tag = "21")]
        pub additional_properties: Option<AdditionalPropertiesItem>,
        #[prost(message, optional, tag = "22")]
        pub r#type: Option<TypeItem>,
        #[prost(message, optional, tag = "23")]
        pub items: Option<ItemsItem>,
        #[prost(message, optional, tag = "25")]
        pub properties: Option<Properties>,
        #[prost(message, repeated, tag = "31")]
        pub vendor_extension: Vec<NamedAny>,
    }

    /// `oneof {Schema schema = 1; bool boolean = 2}`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AdditionalPropertiesItem {
        #[prost(message, optional, boxed, tag = "1")]
        pub schema: Option<Box<Schema>>,
        #[prost(bool, optional, tag = "2")]
        pub boolean: Option<bool>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeItem {
        #[prost(string, repeated, tag = "1")]
        pub value: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ItemsItem {
        #[prost(message, repeated, tag = "1")]
        pub schema: Vec<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Properties {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedAny {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Any>,
    }

    /// A value as YAML text (`string yaml = 2`); JSON is YAML, as kubectl reads it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "2")]
        pub yaml: String,
    }

    fn s(v: &Value, k: &str) -> String {
        v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
    }

    fn f(v: &Value, k: &str) -> f64 {
        v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
    }

    fn i(v: &Value, k: &str) -> i64 {
        v.get(k).and_then(Value::as_i64).unwrap_or(0)
    }

    fn b(v: &Value, k: &str) -> bool {
        v.get(k).and_then(Value::as_bool).unwrap_or(false)
    }

    fn any(v: &Value) -> Any {
        Any {
            yaml: serde_json::to_string(v).unwrap_or_default(),
        }
    }

    /// The `x-` keys of an object, in key order.
    fn extensions(v: &Value) -> Vec<NamedAny> {
        v.as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("x-"))
            .map(|(k, v)| NamedAny {
                name: k.clone(),
                value: Some(any(v)),
            })
            .collect()
    }

    pub fn document(doc: &Value) -> Document {
        let paths = doc
            .get("paths")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, item)| NamedPathItem {
                name: name.clone(),
                value: Some(path_item(item)),
            })
            .collect();
        Document {
            swagger: s(doc, "swagger"),
            info: Some(Info {
                title: s(&doc["info"], "title"),
                version: s(&doc["info"], "version"),
            }),
            paths: Some(Paths { path: paths }),
            definitions: Some(Definitions {
                additional_properties: named_schemas(doc.get("definitions")),
            }),
        }
    }

    fn named_schemas(v: Option<&Value>) -> Vec<NamedSchema> {
        v.and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, s)| NamedSchema {
                name: name.clone(),
                value: Some(schema(s)),
            })
            .collect()
    }

    fn path_item(item: &Value) -> PathItem {
        let op = |m: &str| item.get(m).map(operation);
        PathItem {
            get: op("get"),
            put: op("put"),
            post: op("post"),
            delete: op("delete"),
            patch: op("patch"),
            parameters: parameters(item),
        }
    }

    fn parameters(v: &Value) -> Vec<ParametersItem> {
        v.get("parameters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| {
                let non_body = if p["in"] == "path" {
                    NonBodyParameter {
                        path_parameter_sub_schema: Some(PathParameterSubSchema {
                            required: b(p, "required"),
                            r#in: s(p, "in"),
                            description: s(p, "description"),
                            name: s(p, "name"),
                            r#type: s(p, "type"),
                        }),
                        ..Default::default()
                    }
                } else {
                    NonBodyParameter {
                        query_parameter_sub_schema: Some(QueryParameterSubSchema {
                            required: b(p, "required"),
                            r#in: s(p, "in"),
                            description: s(p, "description"),
                            name: s(p, "name"),
                            r#type: s(p, "type"),
                            unique_items: b(p, "uniqueItems"),
                        }),
                        ..Default::default()
                    }
                };
                ParametersItem {
                    parameter: Some(Parameter {
                        non_body_parameter: Some(non_body),
                    }),
                }
            })
            .collect()
    }

    fn operation(op: &Value) -> Operation {
        let responses = op
            .get("responses")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(code, r)| NamedResponseValue {
                name: code.clone(),
                value: Some(ResponseValue {
                    response: Some(Response {
                        description: s(r, "description"),
                    }),
                }),
            })
            .collect();
        Operation {
            tags: op
                .get("tags")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(String::from))
                .collect(),
            description: s(op, "description"),
            operation_id: s(op, "operationId"),
            parameters: parameters(op),
            responses: Some(Responses {
                response_code: responses,
            }),
            vendor_extension: extensions(op),
        }
    }

    pub fn schema(v: &Value) -> Schema {
        let additional_properties = match v.get("additionalProperties") {
            Some(Value::Bool(allowed)) => Some(AdditionalPropertiesItem {
                schema: None,
                boolean: Some(*allowed),
            }),
            Some(s @ Value::Object(_)) => Some(AdditionalPropertiesItem {
                schema: Some(Box::new(schema(s))),
                boolean: None,
            }),
            _ => None,
        };
        let r#type = match v.get("type") {
            Some(Value::String(t)) => Some(TypeItem {
                value: vec![t.clone()],
            }),
            Some(Value::Array(ts)) => Some(TypeItem {
                value: ts
                    .iter()
                    .filter_map(|t| t.as_str().map(String::from))
                    .collect(),
            }),
            _ => None,
        };
        Schema {
            xref: s(v, "$ref"),
            format: s(v, "format"),
            title: s(v, "title"),
            description: s(v, "description"),
            multiple_of: f(v, "multipleOf"),
            maximum: f(v, "maximum"),
            exclusive_maximum: b(v, "exclusiveMaximum"),
            minimum: f(v, "minimum"),
            exclusive_minimum: b(v, "exclusiveMinimum"),
            max_length: i(v, "maxLength"),
            min_length: i(v, "minLength"),
            pattern: s(v, "pattern"),
            max_items: i(v, "maxItems"),
            min_items: i(v, "minItems"),
            unique_items: b(v, "uniqueItems"),
            max_properties: i(v, "maxProperties"),
            min_properties: i(v, "minProperties"),
            required: v
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|r| r.as_str().map(String::from))
                .collect(),
            r#enum: v
                .get("enum")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(any)
                .collect(),
            additional_properties,
            r#type,
            items: v.get("items").filter(|i| i.is_object()).map(|i| ItemsItem {
                schema: vec![schema(i)],
            }),
            // Only a non-empty `properties` is kept (see `convert`), so presence says the same.
            properties: v
                .get("properties")
                .filter(|p| p.as_object().is_some_and(|p| !p.is_empty()))
                .map(|p| Properties {
                    additional_properties: named_schemas(Some(p)),
                }),
            vendor_extension: extensions(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_apimachinery::openapi::OpenApiResource;

    fn mc_like() -> Vec<OpenApiResource> {
        let crd = json!({"spec": {"group": "x.io", "scope": "Cluster", "names": {"plural": "ws", "kind": "W"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "flag": {"type": "boolean"},
                    "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}});
        let mut all = builtin_resources();
        all.extend(OpenApiResource::from_crd(&crd));
        all
    }

    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                    out.push(r);
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn value_validations_that_v2_cannot_say_are_dropped() {
        let v3 = json!({"type": "object", "default": {}, "properties": {
            "either": {"type": "string", "anyOf": [{"pattern": "a"}], "oneOf": [{}], "allOf": [{}, {}], "not": {}},
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}});
        assert_eq!(
            convert(&v3),
            json!({"type": "object", "properties": {
                "either": {"type": "string"},
                "port": {"x-kubernetes-int-or-string": true}}}),
            "an int-or-string field is left without a type, which kubectl checks not at all"
        );
    }

    #[test]
    fn nullable_fields_lose_type_fields_and_requiredness() {
        let v3 = json!({"type": "object", "required": ["a", "b"], "properties": {
            "a": {"type": "object", "nullable": true, "properties": {"x": {"type": "string"}}},
            "b": {"type": "array", "nullable": true, "items": {"type": "string"}}}});
        assert_eq!(
            convert(&v3),
            json!({"type": "object", "properties": {"a": {}, "b": {}}})
        );
        let map = json!({"type": "object", "required": ["k"],
            "additionalProperties": {"type": "string", "nullable": true}});
        assert_eq!(
            convert(&map),
            json!({"type": "object", "additionalProperties": {}}),
            "nullable values: nothing is required"
        );
        let kept =
            json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}});
        assert_eq!(convert(&kept), kept);
    }

    #[test]
    fn fields_keeping_unknown_fields_lose_their_fields() {
        let v3 = json!({"type": "object", "properties": {
            "o": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                  "properties": {"x": {"type": "string"}}},
            "l": {"type": "array", "x-kubernetes-preserve-unknown-fields": true, "items": {"type": "string"}},
            "empty": {"type": "object", "properties": {}}}});
        assert_eq!(
            convert(&v3),
            json!({"type": "object", "properties": {
                "o": {"x-kubernetes-preserve-unknown-fields": true},
                "l": {"x-kubernetes-preserve-unknown-fields": true},
                "empty": {"type": "object"}}}),
            "an array without items is untyped; an empty `properties` would refuse every field"
        );
    }

    #[test]
    fn a_kind_keeping_unknown_fields_is_a_bare_object() {
        let gvk = json!([{"group": "x.io", "version": "v1", "kind": "W"}]);
        let v3 = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"apiVersion": {"type": "string"}}, "x-kubernetes-group-version-kind": gvk});
        assert_eq!(
            kind_definition(&v3),
            json!({"type": "object", "x-kubernetes-group-version-kind": gvk})
        );
    }

    #[test]
    fn embedded_resources_get_type_and_object_meta() {
        let v3 = json!({"type": "object", "x-kubernetes-embedded-resource": true, "required": ["spec"],
            "properties": {"spec": {"type": "object"}, "metadata": {"type": "object"}}});
        let v2 = convert(&v3);
        assert_eq!(v2["required"], json!(["spec", "kind", "apiVersion"]));
        assert_eq!(
            v2["properties"]["metadata"],
            json!({"$ref": format!("#/definitions/{OBJECT_META}")})
        );
        assert_eq!(v2["properties"]["kind"]["type"], "string");
        let open = json!({"type": "object", "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true});
        assert_eq!(
            convert(&open),
            json!({"x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true})
        );
    }

    #[test]
    fn references_move_to_definitions() {
        let v3 = json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}],
            "default": {}, "description": "d"});
        assert_eq!(
            convert(&v3),
            json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "description": "d"})
        );
    }

    #[test]
    fn custom_kinds_have_definitions_and_built_in_kinds_none() {
        let doc = swagger(&OpenApiV3::build(&mc_like()));
        let defs = doc["definitions"].as_object().unwrap();
        let w = &defs["io.x.v1.W"];
        assert_eq!(
            w["x-kubernetes-group-version-kind"],
            json!([{"group": "x.io", "version": "v1", "kind": "W"}])
        );
        assert_eq!(
            w["properties"]["spec"]["properties"]["flag"],
            json!({"type": "boolean"})
        );
        assert!(defs.contains_key("io.x.v1.WList"));
        assert!(defs.contains_key(OBJECT_META));
        assert!(
            !defs.keys().any(|k| k.starts_with("io.k8s.api.")),
            "built-in kinds have no schema here: kubectl uses its own types"
        );
        let mut all = Vec::new();
        refs(&doc["definitions"], &mut all);
        for r in all {
            let name = r.strip_prefix(DEFINITION_PREFIX).unwrap();
            assert!(defs.contains_key(name), "{r} resolves");
        }
        let patch = &doc["paths"]["/apis/x.io/v1/ws/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "x.io", "version": "v1", "kind": "W"})
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
            "kubectl 1.27 validates single objects server-side on seeing it"
        );
        let cm_patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            cm_patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
    }

    #[test]
    fn protobuf_carries_the_json_document() {
        let v3 = OpenApiV3::build(&mc_like());
        let d = build(&v3);
        let decoded = pb::Document::decode(d.protobuf.as_ref()).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        let w = decoded
            .definitions
            .unwrap()
            .additional_properties
            .into_iter()
            .find(|n| n.name == "io.x.v1.W")
            .and_then(|n| n.value)
            .unwrap();
        assert_eq!(w.r#type.unwrap().value, ["object"]);
        let gvk = &w.vendor_extension[0];
        assert_eq!(gvk.name, "x-kubernetes-group-version-kind");
        assert_eq!(
            gvk.value.as_ref().unwrap().yaml,
            r#"[{"group":"x.io","version":"v1","kind":"W"}]"#
        );
        let props = w.properties.unwrap().additional_properties;
        assert!(props.iter().any(|p| p.name == "spec"));
        let meta = props.iter().find(|p| p.name == "metadata").unwrap();
        assert_eq!(
            meta.value.as_ref().unwrap().xref,
            format!("#/definitions/{OBJECT_META}")
        );
        // Field 1 of the Document, `swagger`: tag 0x0a, length 3.
        assert_eq!(&d.protobuf[..5], b"\x0a\x032.0");
        assert_eq!(d.etag.len(), 128 + 2);
    }

    #[test]
    fn negotiation_follows_kube_apiserver() {
        let kubectl = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        assert_eq!(negotiate(kubectl), Some(Encoding::Protobuf));
        assert_eq!(negotiate(PROTOBUF), Some(Encoding::Protobuf));
        assert_eq!(negotiate("application/json"), Some(Encoding::Json));
        assert_eq!(negotiate(""), Some(Encoding::Json));
        assert_eq!(negotiate("*/*"), Some(Encoding::Json));
        assert_eq!(
            negotiate(&format!("application/json;q=0.5, {kubectl}")),
            Some(Encoding::Protobuf)
        );
        assert_eq!(
            negotiate(&format!("*/*, {kubectl}")),
            Some(Encoding::Protobuf),
            "the more specific clause first at equal quality"
        );
        assert_eq!(negotiate("text/html"), None);
        assert_eq!(negotiate("application/json;q=0"), None);
    }

    #[test]
    fn etags_match_weakly_and_in_lists() {
        assert!(not_modified("\"A\"", "\"A\""));
        assert!(not_modified("W/\"A\"", "\"A\""));
        assert!(not_modified("\"B\", \"A\"", "\"A\""));
        assert!(not_modified("*", "\"A\""));
        assert!(!not_modified("\"B\"", "\"A\""));
    }

    #[test]
    fn the_document_is_built_once_per_build_of_the_v3_documents() {
        let first = Arc::new(OpenApiV3::build(&builtin_resources()));
        let a = document(&first);
        assert!(Arc::ptr_eq(&a, &document(&first)));
        let second = Arc::new(OpenApiV3::build(&mc_like()));
        let b = document(&second);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_ne!(a.etag, b.etag);
        assert!(
            Arc::ptr_eq(&a, &document(&first)),
            "both builds are kept while alive"
        );
    }
}
