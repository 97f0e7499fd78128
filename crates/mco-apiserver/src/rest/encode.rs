//! Request bodies in and responses out: JSON, Tables, objects served in the requested
//! version (from their parsed value or straight from their stored text).

use std::collections::HashMap;

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use super::Target;
use crate::error::ApiError;
use crate::objects::meta_str;
use crate::registry::ResourceInfo;
use crate::tables::{self, Include};

pub(super) fn json_response(code: u16, v: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(v) {
        Ok(body) => typed_json(code, body),
        // Never a 200 with an empty body: a client would read it as an empty object.
        Err(e) => {
            tracing::error!(error = %e, "a response could not be encoded");
            crate::error::ApiError::internal(format!("encoding the response: {e}")).into_response()
        }
    }
}

pub(super) fn typed_json(code: u16, body: Vec<u8>) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) fn wants_table(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

pub(super) fn typed_response(v: &Value, ct: &str) -> Response {
    let mut r = json_response(200, v);
    if let Ok(h) = ct.parse() {
        r.headers_mut().insert(header::CONTENT_TYPE, h);
        r.headers_mut()
            .insert(header::VARY, http::HeaderValue::from_static("Accept"));
    }
    r
}

/// The object in the version the client asked for (conversion `None`).
/// A stored object as served in `version`: its fields with `apiVersion` and `kind` set,
/// serialised straight from the stored value. Building the served object as a new `Value`
/// copied every object on every response and watch line.
pub struct Served<'a> {
    api_version: String,
    kind: &'a str,
    /// As stored, or converted for an API that serves another schema (`events.k8s.io`).
    obj: std::borrow::Cow<'a, Value>,
    slim: bool,
}

impl<'a> Served<'a> {
    pub fn new(info: &'a ResourceInfo, version: &str, obj: &'a Value) -> Served<'a> {
        Served {
            api_version: info.api_version(version),
            kind: &info.kind,
            obj: crate::event::from_storage(info, obj),
            slim: false,
        }
    }

    /// Leave `metadata.managedFields` out (see [`super::InProcess`]).
    pub fn slim(mut self, slim: bool) -> Self {
        self.slim = slim;
        self
    }
}

impl serde::Serialize for Served<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(fields) = self.obj.as_object() else {
            return self.obj.serialize(s);
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("apiVersion", &self.api_version)?;
        m.serialize_entry("kind", self.kind)?;
        for (k, v) in fields {
            if self.slim && k == "metadata" {
                m.serialize_entry(k, &WithoutManagedFields(v))?;
            } else if k != "apiVersion" && k != "kind" {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// A stored object served from its stored text, as [`Served`] serves a parsed one and byte for
/// byte the same: only the top level (and `metadata`, when slim) is split, every other field is
/// copied as the text it is. Parsing the whole object into a `Value` to write it straight out
/// again was most of what a GET cost.
pub struct ServedText<'a> {
    api_version: String,
    kind: &'a str,
    text: &'a str,
    slim: bool,
}

impl<'a> ServedText<'a> {
    pub fn new(info: &'a ResourceInfo, version: &str, text: &'a str, slim: bool) -> Self {
        ServedText {
            api_version: info.api_version(version),
            kind: &info.kind,
            text,
            slim,
        }
    }
}

/// A JSON object's fields in order, their values unparsed.
struct RawFields<'a>(Vec<(std::borrow::Cow<'a, str>, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for RawFields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = RawFields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(a.size_hint().unwrap_or(8));
                while let Some(entry) = a.next_entry()? {
                    out.push(entry);
                }
                Ok(RawFields(out))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Unparsed metadata, serialised without `managedFields`.
struct SlimMeta<'a>(RawFields<'a>);

impl serde::Serialize for SlimMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.0.0.iter().filter(|(k, _)| k != "managedFields") {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl serde::Serialize for ServedText<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let fields: RawFields<'_> = serde_json::from_str(self.text).map_err(S::Error::custom)?;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("apiVersion", &self.api_version)?;
        m.serialize_entry("kind", self.kind)?;
        for (k, v) in &fields.0 {
            if self.slim && k == "metadata" {
                let meta: RawFields<'_> =
                    serde_json::from_str(v.get()).map_err(S::Error::custom)?;
                m.serialize_entry(k, &SlimMeta(meta))?;
            } else if k != "apiVersion" && k != "kind" {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// An object's metadata, serialised without `managedFields`.
struct WithoutManagedFields<'a>(&'a Value);

impl serde::Serialize for WithoutManagedFields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(fields) = self.0.as_object() else {
            return self.0.serialize(s);
        };
        let mut m = s.serialize_map(None)?;
        for (k, v) in fields.iter().filter(|(k, _)| *k != "managedFields") {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A stored object as served in `version` of `info`'s API, converted where that API's schema
/// is not the stored one.
pub fn out(info: &ResourceInfo, version: &str, v: &Value) -> Value {
    typed(
        info,
        version,
        crate::event::from_storage(info, v).into_owned(),
    )
}

/// An object already in `info`'s schema with `apiVersion` and `kind` set.
pub fn typed(info: &ResourceInfo, version: &str, mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "apiVersion".into(),
            Value::String(info.api_version(version)),
        );
        o.insert("kind".into(), Value::String(info.kind.clone()));
    }
    v
}

pub(super) fn object_response(
    t: &Target,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    code: u16,
    v: &Value,
) -> Response {
    if wants_table(headers) {
        let o = out(&t.info, &t.version, v);
        let rv = meta_str(&o, "resourceVersion")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let include = Include::parse(q.get("includeObject").map(String::as_str));
        return json_response(
            code,
            &tables::table(&t.info, &t.version, &[o], include, rv, None),
        );
    }
    json_response(code, &Served::new(&t.info, &t.version, v).slim(t.slim))
}

/// A create/update body: JSON, or the protobuf kubectl's typed generators send for
/// the few kinds `protobuf` knows.
pub(super) fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct.split(';').next().unwrap_or("").trim() == "application/vnd.kubernetes.protobuf"
        && let Some(v) = crate::protobuf::decode(body)
    {
        return Ok(v);
    }
    check_content_type(headers)?;
    parse_body(body)
}

/// Other protobuf and CBOR bodies are refused with 415.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let base = ct.split(';').next().unwrap_or("").trim();
    if base.is_empty() || base == "application/json" || base == "application/yaml" || base == "*/*"
    {
        return Ok(());
    }
    Err(ApiError::unsupported_media(format!(
        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({base} was sent)"
    )))
}

/// The body of a create or update of a `kind`. JSON that does not parse is refused in
/// the words of kube-apiserver's decoder, which fails finding the body's kind.
pub(super) fn decode_object(
    headers: &HeaderMap,
    body: &[u8],
    kind: &str,
) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if matches!(
        ct.split(';').next().unwrap_or("").trim(),
        "" | "application/json"
    ) && let Some(err) = crate::secret::go_json_syntax_error(body)
    {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: {err} ({})",
            summarize(body)
        )));
    }
    decode_body(headers, body)
}

/// How kube-apiserver quotes a body it cannot decode: at most 30 bytes, as text when it
/// starts as an object, else in hex.
fn summarize(body: &[u8]) -> String {
    const MAX: usize = 30;
    let (head, more) = if body.len() > MAX {
        (&body[..MAX], " ...")
    } else {
        (body, "")
    };
    match body.first() {
        None => "<empty>".into(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(head)),
        Some(_) => {
            let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
            format!("{hex}{more}")
        }
    }
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_objects_are_refused_as_kube_apiserver_words_it() {
        let headers = HeaderMap::new();
        let e = decode_object(&headers, br#"{"metadata": {"name": "#, "ConfigMap").unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            r#"the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: unexpected end of JSON input ({"metadata": {"name": )"#
        );
        let e = decode_object(
            &headers,
            br#"{"metadata": {"name": "a-rather-long-name"}, x}"#,
            "Secret",
        )
        .unwrap_err();
        assert!(
            e.message.ends_with(r#"json parse error: invalid character 'x' looking for beginning of object key string ({"metadata": {"name": "a-rathe ...)"#),
            "{}",
            e.message
        );
        assert_eq!(summarize(b""), "<empty>");
        assert_eq!(summarize(b"[1"), "5b31");
        assert!(decode_object(&headers, br#"{"a": 1}"#, "ConfigMap").is_ok());
    }

    /// Served from its text, an object is the same bytes as served from its parsed value:
    /// escapes, numbers, key order, and `managedFields` left out only when slim.
    #[test]
    fn served_text_is_served_value_byte_for_byte() {
        let info = crate::registry::Registry::new()
            .lookup("", "v1", "nodes")
            .unwrap();
        let stored = serde_json::json!({
            "kind": "Node",
            "metadata": {
                "name": "w\u{e9}-\"1\"",
                "annotations": {"a/b": "line\nbreak \\ and \u{1F600}"},
                "managedFields": [{"manager": "x", "fieldsV1": {"f:spec": {}}}],
                "resourceVersion": "12"
            },
            "spec": {"podCIDR": "10.0.0.0/24", "taints": []},
            "status": {"capacity": {"cpu": 2}, "ratio": 0.25, "big": 1e300, "neg": -7}
        });
        let text = serde_json::to_string(&stored).unwrap();
        for slim in [false, true] {
            let from_value =
                serde_json::to_string(&Served::new(&info, "v1", &stored).slim(slim)).unwrap();
            let from_text =
                serde_json::to_string(&ServedText::new(&info, "v1", &text, slim)).unwrap();
            assert_eq!(from_text, from_value, "slim: {slim}");
            assert_eq!(from_text.contains("managedFields"), !slim);
        }
    }
}
