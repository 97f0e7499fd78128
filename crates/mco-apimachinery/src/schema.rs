//! Structural schemas of CustomResourceDefinitions (`openAPIV3Schema`): validation
//! with kube-apiserver's exact error texts, pruning of unknown fields, defaulting,
//! and the list-type information that merges and server-side apply need.
//!
//! The request pipeline of kube-apiserver for a custom resource, and therefore the
//! order in which a caller should use this module, is: [`Structural::prune`], then
//! [`Structural::apply_defaults`], then [`Structural::validate`].
//!
//! Not covered: CEL rules (`x-kubernetes-validations`), `dependencies`, and
//! string formats outside the common set (`date-time`, `date`, `uuid`, `ipv4`,
//! `ipv6`, `cidr`, `mac`, `hostname`, `byte`). For `anyOf`/`oneOf`, upstream
//! reports the failures of the alternative with the most successful checks;
//! here the first failing alternative stands in for it.

use std::fmt;

use regex::Regex;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::jsonpath::{format_go_float, format_go_number};

/// A schema that this module cannot use.
#[derive(Debug, Error)]
pub enum SchemaError {
    /// A `pattern` is not a valid regular expression.
    #[error("invalid pattern {pattern:?} at {path}: {source}")]
    InvalidPattern {
        path: String,
        pattern: String,
        #[source]
        source: Box<regex::Error>,
    },
    /// A schema node, or a keyword that must be an object, is something else.
    #[error("schema at {path} must be an object")]
    NotAnObject { path: String },
}

/// How a list is merged, from `x-kubernetes-list-type` and
/// `x-kubernetes-list-map-keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole (the default).
    Atomic,
    /// Scalars merged as a set.
    Set,
    /// Objects merged by the values of the given keys.
    Map { keys: Vec<String> },
}

/// A parsed structural schema node.
#[derive(Debug, Clone, Default)]
pub struct Structural {
    pub type_: Option<String>,
    pub nullable: bool,
    pub format: Option<String>,
    pub description: Option<String>,
    pub default: Option<Value>,
    /// In declaration order, so that errors come out in a stable order.
    pub properties: Vec<(String, Structural)>,
    /// `additionalProperties` given as a schema: the object is a map.
    pub additional_properties: Option<Box<Structural>>,
    pub items: Option<Box<Structural>>,
    pub required: Vec<String>,
    pub enum_: Option<Vec<Value>>,
    pub pattern: Option<Regex>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: bool,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub unique_items: bool,
    pub preserve_unknown_fields: bool,
    pub embedded_resource: bool,
    pub int_or_string: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    /// Value validations that must all hold.
    pub all_of: Vec<Structural>,
    /// Value validations of which at least one must hold.
    pub any_of: Vec<Structural>,
    /// Value validations of which exactly one must hold.
    pub one_of: Vec<Structural>,
    /// A value validation that must not hold.
    pub not: Option<Box<Structural>>,
}

impl Structural {
    /// Parses an `openAPIV3Schema` value.
    pub fn parse(schema: &Value) -> Result<Self, SchemaError> {
        parse_node(schema, "")
    }

    /// The schema of `version` in a CustomResourceDefinition object, or `None`
    /// when that version has no schema.
    pub fn from_crd(crd: &Value, version: &str) -> Result<Option<Self>, SchemaError> {
        let spec = &crd["spec"];
        let from_version = spec["versions"].as_array().and_then(|versions| {
            versions
                .iter()
                .find(|v| v["name"].as_str() == Some(version))
                .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        });
        // apiextensions/v1beta1 kept one schema for all versions.
        let schema = from_version.or_else(|| spec.pointer("/validation/openAPIV3Schema"));
        schema.map(Structural::parse).transpose()
    }

    /// The schema of property `name`, if declared.
    pub fn property(&self, name: &str) -> Option<&Structural> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, s)| s)
    }

    /// The schema of a field (declared property or map value) of this object.
    fn field_schema(&self, name: &str) -> Option<&Structural> {
        self.property(name)
            .or(self.additional_properties.as_deref())
    }

    /// Follows `path` (object keys; arrays are stepped through implicitly) and
    /// returns the schema found there.
    pub fn schema_at(&self, path: &[&str]) -> Option<&Structural> {
        let mut cur = self;
        for segment in path {
            while cur.is_array() {
                cur = cur.items.as_deref()?;
            }
            cur = cur.field_schema(segment)?;
        }
        Some(cur)
    }

    /// The merge strategy of the list at `path` (e.g. `["spec", "conditions"]`),
    /// or `None` when `path` does not lead to an array.
    pub fn list_type_at(&self, path: &[&str]) -> Option<ListType> {
        let s = self.schema_at(path)?;
        s.is_array().then(|| s.list_type())
    }

    /// This node's list type (meaningful for arrays).
    pub fn list_type(&self) -> ListType {
        match self.list_type.as_deref() {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map {
                keys: self.list_map_keys.clone(),
            },
            _ => ListType::Atomic,
        }
    }

    fn is_array(&self) -> bool {
        self.type_.as_deref() == Some("array")
    }

    /// Validates a whole object the way kube-apiserver validates a custom
    /// resource against its schema. `metadata` at the root is left to the
    /// caller, as upstream validates ObjectMeta separately.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_node(self, obj, "", true, &mut errs);
        errs
    }

    /// Drops fields the schema does not know, as upstream pruning does. At the
    /// root, `apiVersion`, `kind` and `metadata` are always kept, and `metadata`
    /// is not looked into.
    ///
    /// Returns the paths of the dropped fields (`spec.bogus`,
    /// `spec.items[0].extra`), from which the API server builds the
    /// `fieldValidation` outcome: `unknown field "spec.bogus"` as a warning
    /// (`Warn`) or as a `strict decoding error` (`Strict`).
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        prune_node(Some(self), obj, true, At::Root, &mut pruned);
        pruned
    }

    /// Applies schema defaults: null values of non-nullable fields without a
    /// default are dropped, then missing (or null, non-nullable) fields get
    /// their `default`.
    pub fn apply_defaults(&self, obj: &mut Value) {
        prune_nulls(self, obj);
        default_node(self, obj);
    }
}

fn parse_err(path: &str) -> SchemaError {
    SchemaError::NotAnObject {
        path: if path.is_empty() {
            "<root>".to_string()
        } else {
            path.to_string()
        },
    }
}

fn parse_node(v: &Value, path: &str) -> Result<Structural, SchemaError> {
    let m = v.as_object().ok_or_else(|| parse_err(path))?;
    let str_of = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let u64_of = |k: &str| m.get(k).and_then(Value::as_u64);
    let f64_of = |k: &str| m.get(k).and_then(Value::as_f64);
    let bool_of = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);

    let mut s = Structural {
        type_: str_of("type"),
        nullable: bool_of("nullable"),
        format: str_of("format"),
        description: str_of("description"),
        default: m.get("default").cloned(),
        minimum: f64_of("minimum"),
        maximum: f64_of("maximum"),
        exclusive_minimum: bool_of("exclusiveMinimum"),
        exclusive_maximum: bool_of("exclusiveMaximum"),
        multiple_of: f64_of("multipleOf"),
        min_length: u64_of("minLength"),
        max_length: u64_of("maxLength"),
        min_items: u64_of("minItems"),
        max_items: u64_of("maxItems"),
        min_properties: u64_of("minProperties"),
        max_properties: u64_of("maxProperties"),
        unique_items: bool_of("uniqueItems"),
        preserve_unknown_fields: bool_of("x-kubernetes-preserve-unknown-fields"),
        embedded_resource: bool_of("x-kubernetes-embedded-resource"),
        int_or_string: bool_of("x-kubernetes-int-or-string"),
        list_type: str_of("x-kubernetes-list-type"),
        map_type: str_of("x-kubernetes-map-type"),
        ..Structural::default()
    };
    if s.format.as_deref() == Some("int-or-string") && s.type_.is_none() {
        s.int_or_string = true;
    }
    if let Some(keys) = m
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
    {
        s.list_map_keys = keys
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
    }
    if let Some(req) = m.get("required").and_then(Value::as_array) {
        s.required = req
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
    }
    if let Some(e) = m.get("enum").and_then(Value::as_array) {
        s.enum_ = Some(e.clone());
    }
    if let Some(p) = m.get("pattern").and_then(Value::as_str) {
        let re = Regex::new(p).map_err(|e| SchemaError::InvalidPattern {
            path: path.to_string(),
            pattern: p.to_string(),
            source: Box::new(e),
        })?;
        s.pattern = Some(re);
    }
    if let Some(props) = m.get("properties") {
        let props = props
            .as_object()
            .ok_or_else(|| parse_err(&child(path, "properties")))?;
        for (k, pv) in props {
            s.properties
                .push((k.clone(), parse_node(pv, &child(path, k))?));
        }
    }
    match m.get("additionalProperties") {
        Some(Value::Object(_)) => {
            let ap = parse_node(
                &m["additionalProperties"],
                &child(path, "additionalProperties"),
            )?;
            s.additional_properties = Some(Box::new(ap));
        }
        // `true` means "any value": a schemaless map that keeps what it gets.
        Some(Value::Bool(true)) => {
            s.additional_properties = Some(Box::new(Structural {
                preserve_unknown_fields: true,
                ..Structural::default()
            }));
        }
        _ => {}
    }
    for (key, target) in [
        ("allOf", &mut s.all_of),
        ("anyOf", &mut s.any_of),
        ("oneOf", &mut s.one_of),
    ] {
        if let Some(list) = m.get(key) {
            let list = list
                .as_array()
                .ok_or_else(|| parse_err(&child(path, key)))?;
            for (i, sub) in list.iter().enumerate() {
                target.push(parse_node(sub, &format!("{}[{i}]", child(path, key)))?);
            }
        }
    }
    if let Some(not) = m.get("not") {
        s.not = Some(Box::new(parse_node(not, &child(path, "not"))?));
    }
    match m.get("items") {
        Some(items @ Value::Object(_)) => {
            s.items = Some(Box::new(parse_node(items, &format!("{path}[*]"))?));
        }
        Some(Value::Array(list)) if !list.is_empty() => {
            s.items = Some(Box::new(parse_node(&list[0], &format!("{path}[*]"))?));
        }
        _ => {}
    }
    Ok(s)
}

/// kube-openapi joins paths with dots and leaves the root empty.
fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

// ---------------------------------------------------------------------------
// Field errors

/// The kind of a [`FieldError`], mirroring `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
    TypeInvalid,
}

impl FieldErrorType {
    /// The `details.causes[].reason` kube-apiserver reports.
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "FieldValueNotFound",
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::TooLong => "FieldValueTooLong",
            FieldErrorType::TooMany => "FieldValueTooMany",
            FieldErrorType::Internal => "InternalError",
            FieldErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human text that starts the message.
    pub fn message(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "Not found",
            FieldErrorType::Required => "Required value",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::Invalid | FieldErrorType::TypeInvalid => "Invalid value",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::TooLong => "Too long",
            FieldErrorType::TooMany => "Too many",
            FieldErrorType::Internal => "Internal error",
        }
    }
}

/// One validation failure, shaped like apimachinery's `field.Error` so that the
/// API server can build `Status.details.causes` (`reason`, `field`, and
/// [`FieldError::body`] as `message`) and kubectl prints what it prints against
/// kube-apiserver.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub type_: FieldErrorType,
    /// The field path, such as `spec.items[2].name`.
    pub field: String,
    /// The offending value; `None` when upstream omits it from the message.
    pub bad_value: Option<Value>,
    pub detail: String,
}

impl FieldError {
    fn new(type_: FieldErrorType, field: &str, bad_value: Option<Value>, detail: String) -> Self {
        FieldError {
            type_,
            field: field.to_string(),
            bad_value,
            detail,
        }
    }

    /// `field.Required`.
    pub fn required(field: &str, detail: &str) -> Self {
        Self::new(
            FieldErrorType::Required,
            field,
            Some(Value::String(String::new())),
            detail.to_string(),
        )
    }

    /// `field.Invalid`.
    pub fn invalid(field: &str, value: Value, detail: &str) -> Self {
        Self::new(
            FieldErrorType::Invalid,
            field,
            Some(value),
            detail.to_string(),
        )
    }

    /// `field.TypeInvalid`.
    pub fn type_invalid(field: &str, value: Value, detail: &str) -> Self {
        Self::new(
            FieldErrorType::TypeInvalid,
            field,
            Some(value),
            detail.to_string(),
        )
    }

    /// `field.NotSupported`; `supported` are listed quoted, in order.
    pub fn not_supported(field: &str, value: Value, supported: &[String]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(FieldErrorType::NotSupported, field, Some(value), detail)
    }

    /// `field.TooLongMaxLength`, which CRD validation uses for `maxLength`.
    pub fn too_long(field: &str, value: Value, max_length: Option<u64>) -> Self {
        let detail = match max_length {
            Some(max) => format!("may not be longer than {max}"),
            None => "value is too long".to_string(),
        };
        Self::new(FieldErrorType::TooLong, field, Some(value), detail)
    }

    /// `field.TooMany`.
    pub fn too_many(field: &str, actual: Option<u64>, max: Option<u64>) -> Self {
        let detail = match max {
            Some(max) => format!("must have at most {max} items"),
            None => "has too many items".to_string(),
        };
        Self::new(
            FieldErrorType::TooMany,
            field,
            actual.map(Value::from),
            detail,
        )
    }

    /// `field.Duplicate`.
    pub fn duplicate(field: &str, value: Value) -> Self {
        Self::new(FieldErrorType::Duplicate, field, Some(value), String::new())
    }

    /// `field.Forbidden`.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::new(
            FieldErrorType::Forbidden,
            field,
            Some(Value::String(String::new())),
            detail.to_string(),
        )
    }

    /// The message without the field name (`ErrorBody` upstream); this is what
    /// goes into `details.causes[].message`.
    pub fn body(&self) -> String {
        let mut s = match (self.type_, &self.bad_value) {
            (
                FieldErrorType::Required
                | FieldErrorType::Forbidden
                | FieldErrorType::TooLong
                | FieldErrorType::Internal,
                _,
            )
            | (_, None) => self.type_.message().to_string(),
            (_, Some(v)) => format!("{}: {}", self.type_.message(), go_value(v)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The text of an error list as `ErrorList.ToAggregate().Error()` renders it:
/// duplicates dropped, one message bare, several as `[a, b]`.
pub fn aggregate_message(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.len() {
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// A bad value as `ErrorBody` prints it: strings quoted, scalars with `%v`,
/// null as `"null"`, anything else in Go's `%#v` form.
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format_go_number(n),
        Value::Array(_) | Value::Object(_) => go_sharp_v(v),
    }
}

/// Go's `%#v` of an `interface{}` holding decoded JSON.
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format_go_number(n),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", go_quote(k), go_sharp_v(&map[k])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

/// Go's `strconv.Quote` (and `%q`): upstream's messages quote with it.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let cp = c as u32;
                if cp <= 0xffff {
                    out.push_str(&format!("\\u{cp:04x}"));
                } else {
                    out.push_str(&format!("\\U{cp:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------
// Validation (kube-openapi's SchemaValidator, as CRDs use it)

/// The JSON type name kube-openapi infers for a value.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn in_body(path: &str, rest: &str) -> String {
    format!("{path} in body {rest}")
}

fn validate_node(s: &Structural, v: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    let types: Vec<&str> = if s.int_or_string {
        vec!["integer", "string"]
    } else {
        s.type_.iter().map(String::as_str).collect()
    };

    if v.is_null() {
        if !types.is_empty() && !s.nullable {
            let t = types.join(",");
            errs.push(FieldError::type_invalid(
                path,
                Value::String("null".into()),
                &in_body(path, &format!("must be of type {t}: \"null\"")),
            ));
        }
        validate_enum(s, v, path, errs);
        return;
    }

    if !types.is_empty() {
        let actual = json_type(v);
        let float_int = actual == "number"
            && types.contains(&"integer")
            && v.as_f64().is_some_and(|f| f.fract() == 0.0);
        let int_float = actual == "integer" && types.contains(&"number");
        if !(types.contains(&actual) || float_int || int_float) {
            let t = types.join(",");
            errs.push(FieldError::type_invalid(
                path,
                Value::String(actual.into()),
                &in_body(path, &format!("must be of type {t}: {}", go_quote(actual))),
            ));
        }
    }

    validate_schema_props(s, v, path, errs);

    match v {
        Value::String(text) => {
            validate_string(s, text, path, errs);
            validate_format(s, text, path, errs);
        }
        Value::Number(n) => validate_number(s, n, path, errs),
        Value::Array(items) => validate_array(s, items, path, errs),
        _ => {}
    }
    validate_enum(s, v, path, errs);
    if let Value::Object(map) = v {
        validate_object(s, map, path, root, errs);
    }
}

fn validate_string(s: &Structural, text: &str, path: &str, errs: &mut Vec<FieldError>) {
    // Upstream stops at the first string failure.
    let len = text.chars().count() as u64;
    if let Some(max) = s.max_length
        && len > max
    {
        errs.push(FieldError::too_long(
            path,
            Value::String(text.into()),
            Some(max),
        ));
        return;
    }
    if let Some(min) = s.min_length
        && len < min
    {
        errs.push(FieldError::invalid(
            path,
            Value::String(text.into()),
            &in_body(path, &format!("should be at least {min} chars long")),
        ));
        return;
    }
    if let Some(re) = &s.pattern
        && !re.is_match(text)
    {
        errs.push(FieldError::invalid(
            path,
            Value::String(text.into()),
            &in_body(path, &format!("should match '{}'", re.as_str())),
        ));
    }
}

/// `anyOf`, `oneOf`, `allOf` and `not`. Their own messages are not field
/// errors upstream, so they surface with an empty field path, as in
/// `: Invalid value: "": "spec.x" must validate at least one schema (anyOf)`.
fn validate_schema_props(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let composite = |detail: String| FieldError::invalid("", Value::String(String::new()), &detail);
    let run = |sub: &Structural| {
        let mut e = Vec::new();
        validate_node(sub, v, path, false, &mut e);
        e
    };
    if !s.any_of.is_empty() {
        let mut best: Option<Vec<FieldError>> = None;
        let mut ok = false;
        for sub in &s.any_of {
            let e = run(sub);
            if e.is_empty() {
                ok = true;
                best = None;
                break;
            }
            best.get_or_insert(e);
        }
        if !ok {
            errs.push(composite(format!(
                "{} must validate at least one schema (anyOf)",
                go_quote(path)
            )));
        }
        errs.extend(best.unwrap_or_default());
    }
    if !s.one_of.is_empty() {
        let mut best: Option<Vec<FieldError>> = None;
        let mut validated = 0;
        for sub in &s.one_of {
            let e = run(sub);
            if e.is_empty() {
                validated += 1;
                best = None;
            } else if validated == 0 {
                best.get_or_insert(e);
            }
        }
        if validated != 1 {
            let additional = if validated == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {validated} valid alternatives")
            };
            errs.push(composite(format!(
                "{} must validate one and only one schema (oneOf). {additional}",
                go_quote(path)
            )));
            errs.extend(best.unwrap_or_default());
        }
    }
    if !s.all_of.is_empty() {
        let mut validated = 0;
        for sub in &s.all_of {
            let e = run(sub);
            if e.is_empty() {
                validated += 1;
            }
            errs.extend(e);
        }
        if validated != s.all_of.len() {
            let additional = if validated == 0 {
                ". None validated"
            } else {
                ""
            };
            errs.push(composite(format!(
                "{} must validate all the schemas (allOf){additional}",
                go_quote(path)
            )));
        }
    }
    if let Some(not) = &s.not
        && run(not).is_empty()
    {
        errs.push(composite(format!(
            "{} must not validate the schema (not)",
            go_quote(path)
        )));
    }
}

/// String formats kube-apiserver checks (strfmt's registry); unknown formats,
/// and formats on non-strings, are not checked.
fn validate_format(s: &Structural, text: &str, path: &str, errs: &mut Vec<FieldError>) {
    let Some(format) = s.format.as_deref() else {
        return;
    };
    let valid = match format {
        "date-time" | "datetime" => is_date_time(text),
        "date" => text.parse::<jiff::civil::Date>().is_ok() && text.len() == 10,
        "uuid" | "uuid3" | "uuid4" | "uuid5" => is_uuid(text),
        "ipv4" => text.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(text),
        "mac" => is_mac(text),
        "hostname" => is_hostname(text),
        "byte" => is_base64(text),
        _ => return,
    };
    if !valid {
        errs.push(FieldError::type_invalid(
            path,
            Value::String(text.into()),
            &in_body(
                path,
                &format!("must be of type {format}: {}", go_quote(text)),
            ),
        ));
    }
}

fn is_date_time(text: &str) -> bool {
    // strfmt accepts RFC 3339 with or without fractional seconds, and local
    // times without an offset.
    text.len() >= 19
        && (text.parse::<jiff::Timestamp>().is_ok()
            || text.parse::<jiff::civil::DateTime>().is_ok())
        && text
            .as_bytes()
            .get(10)
            .is_some_and(|b| matches!(b, b'T' | b't' | b' '))
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_cidr(text: &str) -> bool {
    let Some((ip, bits)) = text.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn is_mac(text: &str) -> bool {
    let sep = if text.contains('-') { '-' } else { ':' };
    let groups: Vec<&str> = text.split(sep).collect();
    matches!(groups.len(), 6 | 8 | 20)
        && groups
            .iter()
            .all(|g| g.len() == 2 && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_hostname(text: &str) -> bool {
    let trimmed = text.strip_suffix('.').unwrap_or(text);
    !trimmed.is_empty()
        && text.len() <= 255
        && trimmed.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn is_base64(text: &str) -> bool {
    let body = text.trim_end_matches('=');
    text.len().is_multiple_of(4)
        && text.len() - body.len() <= 2
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/')
}

fn validate_number(s: &Structural, n: &serde_json::Number, path: &str, errs: &mut Vec<FieldError>) {
    let value = Value::Number(n.clone());
    let x = n.as_f64().unwrap_or(0.0);
    let is_int = !n.is_f64();
    // Integers are checked against bounds truncated to integers, and the bound is
    // printed as an integer; floats print the bound with `%v`.
    let bound = |b: f64| {
        if is_int {
            (b as i64).to_string()
        } else {
            format_go_float(b)
        }
    };
    if let Some(m) = s.multiple_of
        && m != 0.0
    {
        let q = x / m;
        if q.fract().abs() > f64::EPSILON * q.abs().max(1.0) {
            errs.push(FieldError::invalid(
                path,
                value.clone(),
                &in_body(
                    path,
                    &format!("should be a multiple of {}", format_go_float(m)),
                ),
            ));
        }
    }
    if let Some(max) = s.maximum {
        let (over, word) = if is_int {
            let (i, b) = (n.as_i64().unwrap_or(i64::MAX), max as i64);
            if s.exclusive_maximum {
                (i >= b, "less than")
            } else {
                (i > b, "less than or equal to")
            }
        } else if s.exclusive_maximum {
            (x >= max, "less than")
        } else {
            (x > max, "less than or equal to")
        };
        if over {
            errs.push(FieldError::invalid(
                path,
                value.clone(),
                &in_body(path, &format!("should be {word} {}", bound(max))),
            ));
        }
    }
    if let Some(min) = s.minimum {
        let (under, word) = if is_int {
            let (i, b) = (n.as_i64().unwrap_or(i64::MIN), min as i64);
            if s.exclusive_minimum {
                (i <= b, "greater than")
            } else {
                (i < b, "greater than or equal to")
            }
        } else if s.exclusive_minimum {
            (x <= min, "greater than")
        } else {
            (x < min, "greater than or equal to")
        };
        if under {
            errs.push(FieldError::invalid(
                path,
                value,
                &in_body(path, &format!("should be {word} {}", bound(min))),
            ));
        }
    }
}

fn validate_array(s: &Structural, items: &[Value], path: &str, errs: &mut Vec<FieldError>) {
    if let Some(item_schema) = &s.items {
        for (i, item) in items.iter().enumerate() {
            validate_node(item_schema, item, &format!("{path}[{i}]"), false, errs);
        }
    }
    let size = items.len() as u64;
    if let Some(min) = s.min_items
        && size < min
    {
        errs.push(FieldError::invalid(
            path,
            Value::from(size),
            &in_body(path, &format!("should have at least {min} items")),
        ));
    }
    if let Some(max) = s.max_items
        && size > max
    {
        errs.push(FieldError::too_many(path, Some(size), Some(max)));
    }
    if s.unique_items && has_duplicates(items) {
        errs.push(FieldError::invalid(
            path,
            Value::String(String::new()),
            &in_body(path, "shouldn't contain duplicates"),
        ));
    }
    validate_list_type(s, items, path, errs);
}

fn has_duplicates(items: &[Value]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, a)| items[..i].iter().any(|b| json_equal(a, b)))
}

/// `x-kubernetes-list-type: set|map` forbid duplicates (apiextensions'
/// `ValidateListSetsAndMaps`).
fn validate_list_type(s: &Structural, items: &[Value], path: &str, errs: &mut Vec<FieldError>) {
    match s.list_type() {
        ListType::Atomic => {}
        ListType::Set => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].iter().any(|prev| json_equal(prev, item)) {
                    errs.push(FieldError::duplicate(&format!("{path}[{i}]"), item.clone()));
                }
            }
        }
        ListType::Map { keys } => {
            let key_of = |item: &Value| -> Value {
                let mut m = Map::new();
                for k in &keys {
                    if let Some(v) = item.get(k) {
                        m.insert(k.clone(), v.clone());
                    }
                }
                Value::Object(m)
            };
            let all: Vec<Value> = items.iter().map(key_of).collect();
            for (i, key) in all.iter().enumerate() {
                if all[..i].iter().any(|prev| json_equal(prev, key)) {
                    errs.push(FieldError::duplicate(&format!("{path}[{i}]"), key.clone()));
                }
            }
        }
    }
}

fn validate_enum(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(allowed) = &s.enum_ else { return };
    if allowed.is_empty() || (!v.is_null() && allowed.iter().any(|a| json_equal(a, v))) {
        return;
    }
    let supported: Vec<String> = allowed
        .iter()
        .map(|a| match a {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    errs.push(FieldError::not_supported(path, v.clone(), &supported));
}

fn validate_object(
    s: &Structural,
    map: &Map<String, Value>,
    path: &str,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    let count = map.len() as u64;
    if let Some(min) = s.min_properties
        && count < min
    {
        errs.push(FieldError::invalid(
            path,
            Value::from(count),
            &in_body(path, &format!("should have at least {min} properties")),
        ));
        return;
    }
    if let Some(max) = s.max_properties
        && count > max
    {
        errs.push(FieldError::too_many(path, Some(count), Some(max)));
        return;
    }
    if let Some(ap) = &s.additional_properties {
        for (k, v) in map {
            if s.property(k).is_none() {
                validate_node(ap, v, &child(path, k), false, errs);
            }
        }
    }
    for (name, prop) in &s.properties {
        // ObjectMeta is validated by the API server itself, not by the schema.
        if root && name == "metadata" {
            continue;
        }
        if let Some(v) = map.get(name) {
            validate_node(prop, v, &child(path, name), false, errs);
        }
    }
    for name in &s.required {
        if !map.contains_key(name) {
            errs.push(FieldError::required(&child(path, name), ""));
        }
    }
    if s.embedded_resource {
        validate_embedded(map, path, errs);
    }
}

/// Embedded resources must carry a non-empty `apiVersion` and `kind`.
fn validate_embedded(map: &Map<String, Value>, path: &str, errs: &mut Vec<FieldError>) {
    for key in ["apiVersion", "kind"] {
        let field = child(path, key);
        match map.get(key) {
            None => errs.push(FieldError::required(&field, "must not be empty")),
            Some(Value::String(s)) if s.is_empty() => {
                errs.push(FieldError::invalid(
                    &field,
                    Value::String(String::new()),
                    "must not be empty",
                ));
            }
            Some(Value::String(s)) if key == "apiVersion" && s.matches('/').count() > 1 => {
                errs.push(FieldError::invalid(
                    &field,
                    Value::String(s.clone()),
                    &format!("unexpected GroupVersion string: {s}"),
                ));
            }
            Some(Value::String(_)) => {}
            Some(other) => errs.push(FieldError::invalid(
                &field,
                other.clone(),
                "must be a string",
            )),
        }
    }
}

/// Equality of decoded JSON, with numbers compared by value (`1` equals `1.0`).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------
// Pruning

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn is_meta(k: &str) -> bool {
    META_FIELDS.contains(&k)
}

/// Where pruning is, rendered only for a field it removes: formatting every visited path cost
/// more than the pruning itself on the API server's write path.
#[derive(Clone, Copy)]
enum At<'a> {
    Root,
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    fn render(&self, out: &mut String) {
        match self {
            At::Root => {}
            At::Key(parent, k) => {
                parent.render(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            At::Index(parent, i) => {
                parent.render(out);
                out.push_str(&format!("[{i}]"));
            }
        }
    }

    fn child_path(&self, k: &str) -> String {
        let mut out = String::new();
        At::Key(self, k).render(&mut out);
        out
    }
}

/// Prunes `v` and records the path of every dropped field.
fn prune_node(
    s: Option<&Structural>,
    v: &mut Value,
    root: bool,
    at: At<'_>,
    pruned: &mut Vec<String>,
) {
    if let Some(s) = s
        && s.preserve_unknown_fields
    {
        prune_known_only(s, v, root, at, pruned);
        return;
    }
    match v {
        Value::Object(map) => {
            let keep_meta = root || s.is_some_and(|s| s.embedded_resource);
            let keep = |k: &str| {
                (keep_meta && is_meta(k))
                    || s.is_some_and(|s| {
                        s.property(k).is_some() || s.additional_properties.is_some()
                    })
            };
            if !map.keys().all(|k| keep(k)) {
                pruned.extend(map.keys().filter(|k| !keep(k)).map(|k| at.child_path(k)));
                map.retain(|k, _| keep(k));
            }
            let Some(s) = s else { return };
            for (k, child_value) in map.iter_mut() {
                if keep_meta && is_meta(k) {
                    continue;
                }
                prune_node(
                    s.field_schema(k),
                    child_value,
                    false,
                    At::Key(&at, k),
                    pruned,
                );
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for (i, item) in items.iter_mut().enumerate() {
                prune_node(item_schema, item, false, At::Index(&at, i), pruned);
            }
        }
        _ => {}
    }
}

/// Under `x-kubernetes-preserve-unknown-fields`, unknown fields stay but known
/// ones are still pruned by their own schemas.
fn prune_known_only(
    s: &Structural,
    v: &mut Value,
    root: bool,
    at: At<'_>,
    pruned: &mut Vec<String>,
) {
    match v {
        Value::Object(map) => {
            let keep_meta = root || s.embedded_resource;
            for (k, child_value) in map.iter_mut() {
                if keep_meta && is_meta(k) {
                    continue;
                }
                if let Some(cs) = s.field_schema(k) {
                    prune_node(Some(cs), child_value, false, At::Key(&at, k), pruned);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_known_only(is, item, false, At::Index(&at, i), pruned);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Defaulting

fn is_non_nullable_null(v: &Value, s: &Structural) -> bool {
    v.is_null() && !s.nullable
}

fn prune_nulls(s: &Structural, v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, val| match s.property(k) {
                Some(p) => !(val.is_null() && p.default.is_none() && !p.nullable),
                None => true,
            });
            for (k, val) in map.iter_mut() {
                if let Some(cs) = s.field_schema(k) {
                    prune_nulls(cs, val);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for item in items {
                    prune_nulls(is, item);
                }
            }
        }
        _ => {}
    }
}

fn default_node(s: &Structural, v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (name, prop) in &s.properties {
                let Some(default) = &prop.default else {
                    continue;
                };
                let missing = map
                    .get(name)
                    .is_none_or(|cur| is_non_nullable_null(cur, prop));
                if missing {
                    map.insert(name.clone(), default.clone());
                }
            }
            for (k, val) in map.iter_mut() {
                if let Some(prop) = s.property(k) {
                    default_node(prop, val);
                } else if let Some(ap) = s.additional_properties.as_deref() {
                    if is_non_nullable_null(val, ap)
                        && let Some(d) = &ap.default
                    {
                        *val = d.clone();
                    }
                    default_node(ap, val);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for item in items {
                    if is_non_nullable_null(item, is)
                        && let Some(d) = &is.default
                    {
                        *item = d.clone();
                    }
                    default_node(is, item);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Status subresource

/// On create through the main endpoint of a resource with a status
/// subresource, upstream drops `status`; this returns what was dropped.
pub fn strip_status(obj: &mut Value) -> Option<Value> {
    obj.as_object_mut().and_then(|m| m.remove("status"))
}

/// On update through the main endpoint, `status` is kept as it was in `old`.
pub fn preserve_status(new: &mut Value, old: &Value) {
    let Some(map) = new.as_object_mut() else {
        return;
    };
    match old.get("status") {
        Some(status) => {
            map.insert("status".into(), status.clone());
        }
        None => {
            map.remove("status");
        }
    }
}

/// On update through `/status`, the result is `old` with only `status` taken
/// from `new` (and `metadata.managedFields`, which tracks the status change).
pub fn only_status(new: &Value, old: &Value) -> Value {
    let mut out = old.clone();
    if let Some(map) = out.as_object_mut() {
        match new.get("status") {
            Some(status) => {
                map.insert("status".into(), status.clone());
            }
            None => {
                map.remove("status");
            }
        }
        if let Some(mf) = new.pointer("/metadata/managedFields")
            && let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("managedFields".into(), mf.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_quote_matches_strconv_quote() {
        let cases = [
            ("abc", r#""abc""#),
            ("a\"b", r#""a\"b""#),
            ("back\\slash", r#""back\\slash""#),
            ("line\nbreak\ttab", r#""line\nbreak\ttab""#),
            ("\u{1b}", r#""\x1b""#),
            ("héllo", r#""héllo""#),
        ];
        for (input, want) in cases {
            assert_eq!(go_quote(input), want, "{input:?}");
        }
    }

    #[test]
    fn format_checks() {
        let cases: [(&str, &str, bool); 18] = [
            ("date-time", "2026-11-30T10:00:00Z", true),
            ("date-time", "2026-11-30T10:00:00.5-07:00", true),
            ("date-time", "2026-11-30", false),
            ("date-time", "", false),
            ("date", "2026-11-30", true),
            ("date", "2026-13-30", false),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "10.0.0.0/33", false),
            ("cidr", "fd00::/64", true),
            ("mac", "52:54:00:ab:cd:ef", true),
            ("mac", "52:54:00:ab:cd", false),
            ("hostname", "worker-0.example.com", true),
            ("hostname", "-bad", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "aGVsbG8", false),
            ("ipv6", "fe80::1", true),
            ("uuid", "39E06294-2876-5528-AD66-DE63C0281EE9", true),
            ("uuid", "39e0629428765528ad66de63c0281ee9", false),
        ];
        for (format, text, ok) in cases {
            let s = Structural {
                format: Some(format.into()),
                ..Structural::default()
            };
            let mut errs = Vec::new();
            validate_format(&s, text, "f", &mut errs);
            assert_eq!(errs.is_empty(), ok, "{format} {text:?}");
        }
    }

    #[test]
    fn bad_values_print_like_go() {
        let cases = [
            (json!(null), r#""null""#),
            (json!("x"), r#""x""#),
            (json!(3), "3"),
            (json!(2.5), "2.5"),
            (json!(true), "true"),
            (json!(["a", 1]), r#"[]interface {}{"a", 1}"#),
            (
                json!({"b": "x", "a": 1}),
                r#"map[string]interface {}{"a":1, "b":"x"}"#,
            ),
            (
                json!({"n": null}),
                r#"map[string]interface {}{"n":interface {}(nil)}"#,
            ),
        ];
        for (value, want) in cases {
            assert_eq!(go_value(&value), want, "{value}");
        }
    }
}
