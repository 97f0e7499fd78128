//! The HTTP surface: routing, authentication, and the verbs on resources.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::StreamExt;
use http::{HeaderMap, Method, StatusCode, header};
use mco_apimachinery::selector::{
    FieldOperator, FieldSelector, LabelSelector, builtin_selectable_fields, json_needles,
    may_match_json,
};
use serde_json::{Value, json};

use crate::auth::{Identity, mcn_guard};
use crate::controllers::FOREGROUND;
use crate::discovery::{self, DiscoveryFormat};
use crate::error::{ApiError, Cause};
use crate::machinery;
use crate::objects::{self, Part, meta, meta_mut, meta_str};
use crate::registry::{Registry, ResourceInfo};
use crate::store::Select;
use crate::store::{Action, Event, EventType, Outcome, Store, WatchKey};
use crate::tables::{self, Include};
use mco_apimachinery::patch::PatchType;

/// Everything a request handler needs.
pub struct App {
    pub store: Arc<Store>,
    pub registry: Registry,
    /// Evictions check budgets and delete in one step; serialising them keeps two
    /// concurrent evictions from spending the same disruption.
    pub evict_lock: tokio::sync::Mutex<()>,
    /// UIDs deleted with `propagationPolicy=Orphan`: their dependents are kept.
    pub orphaned: Mutex<HashSet<String>>,
    pub addr: SocketAddr,
    pub metrics: crate::metrics::Metrics,
    pub rbac: crate::auth::PolicyCache,
}

/// A resolved resource URL.
#[derive(Debug, Clone)]
pub struct Target {
    pub info: ResourceInfo,
    pub version: String,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    /// Serve objects without `metadata.managedFields` ([`InProcess`] requests).
    pub slim: bool,
}

/// Marks a request made through [`crate::ServerHandle::local_transport`]: the embedded
/// cluster's own controller and simulated nodes. They never read `managedFields` (the largest
/// part of a much-written Node or MachineConfigNode), so their responses and watch events
/// leave it out rather than have every client decode it and throw it away. The mark is a
/// request extension, never a header: nothing on the network can ask for it, and kubectl and
/// every HTTP client see objects exactly as kube-apiserver serves them. Writes still record
/// managed fields as usual.
#[derive(Debug, Clone, Copy)]
pub struct InProcess;

impl Target {
    fn ns_str(&self) -> &str {
        self.ns.as_deref().unwrap_or("")
    }
}

pub async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    match route(&app, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn json_response(code: u16, v: &impl serde::Serialize) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

fn wants_table(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

fn parse_query(uri: &http::Uri) -> HashMap<String, String> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0.into_iter().collect())
        .unwrap_or_default()
}

fn authenticate(app: &App, headers: &HeaderMap) -> Result<Option<Identity>, ApiError> {
    let Some(h) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let token = h
        .to_str()
        .ok()
        .and_then(|s| s.strip_prefix("Bearer "))
        .map(str::trim);
    match token.and_then(|t| app.store.identity_for(t)) {
        Some(id) => Ok(Some(id)),
        None => Err(ApiError::unauthorized()),
    }
}

async fn route(app: &Arc<App>, req: Request) -> Result<Response, ApiError> {
    let method = req.method().clone();
    let in_process = req.extensions().get::<InProcess>().is_some();
    let uri = req.uri().clone();
    let headers = req.headers().clone();
    let query = parse_query(&uri);
    let segs: Vec<String> = uri
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let segs_ref: Vec<&str> = segs.iter().map(String::as_str).collect();
    let public = matches!(
        segs_ref.first(),
        Some(&"version" | &"healthz" | &"livez" | &"readyz")
    );
    let identity = authenticate(app, &headers)?;
    let identity = match (identity, public) {
        (Some(id), _) => id,
        (None, true) => Identity::Admin,
        (None, false) => return Err(ApiError::unauthorized()),
    };
    let body = if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        axum::body::to_bytes(req.into_body(), crate::MAX_BODY)
            .await
            .map_err(|_| ApiError::too_large())?
    } else {
        Bytes::new()
    };
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let get_only = |r: Response| {
        if method == Method::GET {
            Ok(r)
        } else {
            Err(ApiError::method_not_allowed())
        }
    };
    match segs_ref.as_slice() {
        ["version"] => get_only(json_response(200, &discovery::version_info())),
        ["healthz" | "livez" | "readyz", ..] => get_only((StatusCode::OK, "ok").into_response()),
        ["metrics"] => get_only(
            (
                [(
                    header::CONTENT_TYPE,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                app.metrics.encode(),
            )
                .into_response(),
        ),
        ["api"] => {
            let f = discovery::negotiate(&accept);
            let body = match f {
                DiscoveryFormat::Legacy => discovery::legacy_api(&app.addr.to_string()),
                _ => discovery::aggregated(&app.registry, true, f),
            };
            get_only(typed_response(&body, discovery::content_type(f)))
        }
        ["apis"] => {
            let f = discovery::negotiate(&accept);
            let body = match f {
                DiscoveryFormat::Legacy => discovery::legacy_apis(&app.registry),
                _ => discovery::aggregated(&app.registry, false, f),
            };
            get_only(typed_response(&body, discovery::content_type(f)))
        }
        ["api", v] => discovery::legacy_resource_list(&app.registry, "", v)
            .map(|d| json_response(200, &d))
            .ok_or_else(ApiError::not_found_path),
        ["apis", g] => discovery::legacy_group(&app.registry, g)
            .map(|d| json_response(200, &d))
            .ok_or_else(ApiError::not_found_path),
        ["apis", g, v] => discovery::legacy_resource_list(&app.registry, g, v)
            .map(|d| json_response(200, &d))
            .ok_or_else(ApiError::not_found_path),
        ["openapi", "v3"] => get_only(json_response(
            200,
            &discovery::openapi(&app.registry).root(),
        )),
        ["openapi", "v3", rest @ ..] => openapi_doc(app, &rest.join("/"), &query),
        ["api", v, rest @ ..] => {
            let mut t = resolve(app, "", v, rest)?;
            t.slim = in_process;
            counted(app, &method, t, &identity, &query, &headers, body).await
        }
        ["apis", g, v, rest @ ..] => {
            let mut t = resolve(app, g, v, rest)?;
            t.slim = in_process;
            counted(app, &method, t, &identity, &query, &headers, body).await
        }
        _ => Err(ApiError::not_found_path()),
    }
}

/// [`resource`], counted in `apiserver_request_total`.
async fn counted(
    app: &Arc<App>,
    method: &Method,
    t: Target,
    identity: &Identity,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let apply = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/apply-patch"));
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let mut labels = crate::metrics::RequestLabels {
        verb: crate::metrics::verb(method, t.name.is_some(), watch, apply).into(),
        group: t.info.group.clone(),
        resource: t.info.plural.clone(),
        subresource: t.sub.clone().unwrap_or_default(),
        code: String::new(),
    };
    let r = resource(app, method, t, identity, q, headers, body).await;
    labels.code = match &r {
        Ok(resp) => resp.status().as_u16().to_string(),
        Err(e) => e.code.to_string(),
    };
    app.metrics.requests.get_or_create(&labels).inc();
    r
}

fn typed_response(v: &Value, ct: &str) -> Response {
    let mut r = json_response(200, v);
    if let Ok(h) = ct.parse() {
        r.headers_mut().insert(header::CONTENT_TYPE, h);
        r.headers_mut()
            .insert(header::VARY, http::HeaderValue::from_static("Accept"));
    }
    r
}

fn openapi_doc(app: &App, key: &str, q: &HashMap<String, String>) -> Result<Response, ApiError> {
    let all = discovery::openapi(&app.registry);
    let doc = all.document(key).ok_or_else(ApiError::not_found_path)?;
    let mut r = json_response(200, doc);
    if q.get("hash")
        .is_some_and(|h| Some(h.as_str()) == all.hash(key))
    {
        r.headers_mut().insert(
            header::CACHE_CONTROL,
            http::HeaderValue::from_static("public, immutable"),
        );
    }
    Ok(r)
}

fn resolve(app: &App, group: &str, version: &str, rest: &[&str]) -> Result<Target, ApiError> {
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && !(rest.len() == 3 && matches!(rest[2], "status" | "finalize"));
    let (ns, rest) = if namespaced_path {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(n.to_string()), None),
        [p, n, s] => (*p, Some(n.to_string()), Some(s.to_string())),
        _ => return Err(ApiError::not_found_path()),
    };
    let info = app
        .registry
        .lookup(group, version, plural)
        .ok_or_else(ApiError::not_found_path)?;
    if ns.is_some() && !info.namespaced {
        return Err(ApiError::not_found_path());
    }
    if info.namespaced && ns.is_none() && name.is_some() {
        return Err(ApiError::not_found_path());
    }
    match sub.as_deref() {
        None => {}
        Some("status") if info.has_status(version) => {}
        Some("eviction") if info.eviction => {}
        Some(_) => return Err(ApiError::not_found_path()),
    }
    Ok(Target {
        info,
        version: version.to_string(),
        ns,
        name,
        sub,
        slim: false,
    })
}

/// The object in the version the client asked for (conversion `None`).
/// A stored object as served in `version`: its fields with `apiVersion` and `kind` set,
/// serialised straight from the stored value. Building the served object as a new `Value`
/// copied every object on every response and watch line.
pub struct Served<'a> {
    api_version: String,
    kind: &'a str,
    obj: &'a Value,
    slim: bool,
}

impl<'a> Served<'a> {
    pub fn new(info: &'a ResourceInfo, version: &str, obj: &'a Value) -> Served<'a> {
        Served {
            api_version: info.api_version(version),
            kind: &info.kind,
            obj,
            slim: false,
        }
    }

    /// Leave `metadata.managedFields` out (see [`InProcess`]).
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

pub fn out(info: &ResourceInfo, version: &str, v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "apiVersion".into(),
            Value::String(info.api_version(version)),
        );
        o.insert("kind".into(), Value::String(info.kind.clone()));
    }
    v
}

fn object_response(
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
fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
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

fn dry_run(q: &HashMap<String, String>) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
}

async fn resource(
    app: &Arc<App>,
    method: &Method,
    t: Target,
    id: &Identity,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    crate::auth::authorize(&app.rbac, &app.store, id, method, &t, q)?;
    let is_write = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if is_write
        && let Some(name) = t.name.as_deref().or(None)
        && let Some(msg) = mcn_guard(id, &t.info.group, &t.info.plural, name)
    {
        return Err(ApiError::forbidden(msg));
    }
    match (method, t.name.is_some(), t.sub.as_deref()) {
        (&Method::GET, false, _) => {
            if q.get("watch").is_some_and(|w| w == "1" || w == "true") {
                watch(app, &t, q, headers)
            } else {
                list(app, &t, q, headers)
            }
        }
        (&Method::GET, true, _) => {
            let name = t.name.as_deref().unwrap_or("");
            let text = app
                .store
                .text(&t.info.gr(), t.ns_str(), name)
                .ok_or_else(|| ApiError::not_found(&t.info.rref(), name))?;
            if wants_table(headers) {
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                return Ok(object_response(&t, headers, q, 200, &v));
            }
            Ok(json_response(
                200,
                &ServedText::new(&t.info, &t.version, &text, t.slim),
            ))
        }
        (&Method::POST, false, None) => {
            if t.info.namespaced && t.ns.is_none() {
                return Err(ApiError::not_found_path());
            }
            let obj = decode_body(headers, &body)?;
            if let Some(n) = meta_str(&obj, "name")
                && let Some(msg) = mcn_guard(id, &t.info.group, &t.info.plural, n)
            {
                return Err(ApiError::forbidden(msg));
            }
            let ctx = WriteCtx::from_request(q, headers);
            let v = create(app, &t.info, &t.version, t.ns_str(), obj, &ctx).await?;
            Ok(object_response(&t, headers, q, 201, &v))
        }
        (&Method::POST, true, Some("eviction")) => evict(app, &t, &body).await,
        (&Method::PUT, true, sub) => {
            let obj = decode_body(headers, &body)?;
            let m = Modify::from_request(&t, sub, q, headers);
            let v = update(app, &t, obj, &m).await?;
            Ok(object_response(&t, headers, q, 200, &v))
        }
        (&Method::PATCH, true, sub) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let m = Modify::from_request(&t, sub, q, headers);
            let (code, v) = patch(app, &t, ct, &body, q, &m).await?;
            Ok(object_response(&t, headers, q, code, &v))
        }
        (&Method::DELETE, true, None) => {
            let name = t.name.clone().unwrap_or_default();
            let opts = DeleteOpts::parse(q, &body);
            let outcome = delete(app, &t.info, t.ns_str(), &name, opts).await?;
            let v = outcome
                .object()
                .cloned()
                .unwrap_or_else(|| Arc::new(json!({})));
            Ok(object_response(&t, headers, q, 200, &v))
        }
        (&Method::DELETE, false, None) => delete_collection(app, &t, q, headers, &body).await,
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Label and field selectors of a list or watch request.
pub struct Filter {
    label: LabelSelector,
    field: FieldSelector,
    /// Text every match's stored JSON contains, checked before an object is parsed.
    needles: Vec<Vec<String>>,
}

impl Filter {
    fn parse(t: &Target, q: &HashMap<String, String>) -> Result<Filter, ApiError> {
        let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let field = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut supported: Vec<&str> =
            builtin_selectable_fields(&t.info.group, &t.info.kind).to_vec();
        let extra: Vec<String> = t
            .info
            .crd_version(&t.version)
            .map(|v| v.selectable_fields.clone())
            .unwrap_or_default();
        supported.extend(extra.iter().map(String::as_str));
        field
            .check_supported(&supported)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let needles = json_needles(&label, &field);
        Ok(Filter {
            label,
            field,
            needles,
        })
    }

    pub fn matches(&self, v: &Value) -> bool {
        self.label.matches_object(v) && self.field.matches(v)
    }

    /// The one name a `metadata.name=` field selector allows, so a watch can be
    /// keyed by it.
    fn only_name(&self) -> Option<String> {
        self.equal_term("metadata.name").map(str::to_string)
    }

    /// The value an `=`/`==` term requires of `field`, if there is one.
    fn equal_term(&self, field: &str) -> Option<&str> {
        self.field
            .terms()
            .iter()
            .find(|t| {
                t.field == field
                    && matches!(t.op, FieldOperator::Equals | FieldOperator::DoubleEquals)
            })
            .map(|t| t.value.as_str())
    }
}

impl Select for Filter {
    /// See [`json_needles`].
    fn may_match(&self, json: &str) -> bool {
        may_match_json(json, &self.needles)
    }

    fn matches(&self, v: &Value) -> bool {
        Filter::matches(self, v)
    }

    fn pods_on_node(&self) -> Option<&str> {
        self.equal_term("spec.nodeName")
    }
}

fn encode_continue(k: &(String, String)) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&json!([k.0, k.1])).unwrap_or_default())
}

fn decode_continue(s: &str) -> Result<(String, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let v: (String, String) = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok(v)
}

fn list(
    app: &App,
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let filter = Filter::parse(t, q)?;
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let after = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let name = filter.only_name();
    let (rv, items, next) = app.store.list_named(
        &t.info.gr(),
        t.ns.as_deref(),
        name.as_deref(),
        after,
        limit,
        &filter,
    );
    let cont = next.as_ref().map(encode_continue);
    if wants_table(headers) {
        let items: Vec<Value> = items.iter().map(|v| out(&t.info, &t.version, v)).collect();
        let include = Include::parse(q.get("includeObject").map(String::as_str));
        return Ok(json_response(
            200,
            &tables::table(&t.info, &t.version, &items, include, rv, cont),
        ));
    }
    let items: Vec<Served> = items
        .iter()
        .map(|v| Served::new(&t.info, &t.version, v).slim(t.slim))
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct List<'a> {
        kind: &'a str,
        api_version: String,
        metadata: Value,
        items: Vec<Served<'a>>,
    }
    Ok(json_response(
        200,
        &List {
            kind: &t.info.list_kind,
            api_version: t.info.api_version(&t.version),
            metadata,
            items,
        },
    ))
}

/// Decides whether (and as what) a committed event reaches a filtered watcher.
fn visible(e: &Event, gr: &str, ns: Option<&str>, f: &Filter) -> Option<(EventType, Arc<Value>)> {
    if e.gr != gr || ns.is_some_and(|ns| ns != e.ns) {
        return None;
    }
    match e.typ {
        EventType::Added => f.matches(&e.obj).then(|| (EventType::Added, e.obj.clone())),
        EventType::Deleted => f
            .matches(&e.obj)
            .then(|| (EventType::Deleted, e.obj.clone())),
        EventType::Modified => {
            let now = f.matches(&e.obj);
            match (e.old.as_ref().map(|o| f.matches(o)), now) {
                (Some(true), true) | (None, true) => Some((EventType::Modified, e.obj.clone())),
                (Some(true), false) => Some((EventType::Deleted, e.obj.clone())),
                (Some(false), true) => Some((EventType::Added, e.obj.clone())),
                _ => None,
            }
        }
    }
}

struct WatchFmt {
    info: ResourceInfo,
    version: String,
    table: Option<Include>,
    slim: bool,
}

impl WatchFmt {
    fn line(&self, typ: &str, obj: &Value) -> Bytes {
        #[derive(serde::Serialize)]
        struct Line<'a, T> {
            r#type: &'a str,
            object: T,
        }
        let b = match self.table {
            Some(inc) => {
                let o = out(&self.info, &self.version, obj);
                let rv = meta_str(&o, "resourceVersion")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let object = tables::table(&self.info, &self.version, &[o], inc, rv, None);
                serde_json::to_vec(&Line {
                    r#type: typ,
                    object,
                })
            }
            None => serde_json::to_vec(&Line {
                r#type: typ,
                object: Served::new(&self.info, &self.version, obj).slim(self.slim),
            }),
        };
        let mut b = b.unwrap_or_default();
        b.push(b'\n');
        Bytes::from(b)
    }
    /// [`WatchFmt::line`] for a live event, shared with every other watcher that sends the
    /// same line for it. Tables carry the watcher's column choice and are written per watcher.
    fn event_line(&self, e: &Event, typ: EventType, obj: &Value) -> Bytes {
        if self.table.is_some() {
            return self.line(typ.as_str(), obj);
        }
        e.lines.get_or_make(typ, &self.version, self.slim, || {
            self.line(typ.as_str(), obj)
        })
    }
    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut m = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            m["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let o = json!({"kind": self.info.kind, "apiVersion": self.info.api_version(&self.version), "metadata": m});
        let mut b =
            serde_json::to_vec(&json!({"type": "BOOKMARK", "object": o})).unwrap_or_default();
        b.push(b'\n');
        Bytes::from(b)
    }
}

fn error_line(e: &ApiError) -> Bytes {
    let mut b =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

fn watch(
    app: &Arc<App>,
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let filter = Filter::parse(t, q)?;
    let gr = t.info.gr();
    let ns = t.ns.clone();
    let fmt = WatchFmt {
        info: t.info.clone(),
        version: t.version.clone(),
        table: wants_table(headers)
            .then(|| Include::parse(q.get("includeObject").map(String::as_str))),
        slim: t.slim,
    };
    let bookmarks = q
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(1800);
    let key = WatchKey {
        gr: gr.clone(),
        ns: ns.clone(),
        name: filter.only_name(),
    };
    let mut rx = app.store.watch(key.clone());
    let rv_param = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let mut first: Vec<Bytes> = Vec::new();
    let mut last: u64;
    let mut end_now = false;
    if rv_param.is_empty() || rv_param == "0" || send_initial {
        let (rv, items, _) =
            app.store
                .list_named(&gr, ns.as_deref(), key.name.as_deref(), None, None, &filter);
        first.extend(items.iter().map(|v| fmt.line("ADDED", v)));
        last = rv;
        if send_initial && bookmarks {
            first.push(fmt.bookmark(rv, true));
        }
    } else {
        let from: u64 = rv_param
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param}")))?;
        last = from;
        match app.store.events_since(from, &key) {
            None => {
                let e = ApiError::gone(format!(
                    "too old resource version: {from} ({})",
                    app.store.window_start() + 1
                ));
                first.push(error_line(&e));
                end_now = true;
            }
            Some(evs) => {
                for e in evs {
                    last = last.max(e.rv);
                    if let Some((typ, obj)) = visible(&e, &gr, ns.as_deref(), &filter) {
                        first.push(fmt.line(typ.as_str(), &obj));
                    }
                }
            }
        }
    }
    let (tx, brx) = tokio::sync::mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        for b in first {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        if end_now {
            return;
        }
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = tick.tick(), if bookmarks => {
                    if tx.send(fmt.bookmark(last, false)).await.is_err() { return; }
                }
                _ = tx.closed() => return,
                ev = rx.recv() => match ev {
                    Some(e) => {
                        if e.rv <= last { continue; }
                        last = e.rv;
                        if let Some((typ, obj)) = visible(&e, &gr, ns.as_deref(), &filter)
                            && tx.send(fmt.event_line(&e, typ, &obj)).await.is_err()
                        {
                            return;
                        }
                    }
                    None => {
                        if rx.overflowed() {
                            let _ = tx.send(error_line(&ApiError::gone("too old resource version: watcher fell behind"))).await;
                        }
                        return;
                    }
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(brx).map(Ok::<_, Infallible>);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}

fn ensure_namespace(app: &App, info: &ResourceInfo, ns: &str) -> Result<(), ApiError> {
    if info.namespaced && app.store.get("/namespaces", "", ns).is_none() {
        return Err(
            ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
                .with_details(json!({"name": ns, "kind": "namespaces"})),
        );
    }
    Ok(())
}

/// Per-request write options.
#[derive(Debug, Clone, Default)]
pub struct WriteCtx {
    pub dry_run: bool,
    /// The field manager recorded in `managedFields`.
    pub manager: String,
    /// `fieldValidation=Strict`: unknown fields are an error.
    pub strict: bool,
    /// `force=true` on server-side apply.
    pub force: bool,
}

impl WriteCtx {
    fn from_request(q: &HashMap<String, String>, headers: &HeaderMap) -> WriteCtx {
        let ua = headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown");
        WriteCtx {
            dry_run: dry_run(q),
            manager: machinery::manager_for(q.get("fieldManager").map(String::as_str), ua),
            strict: q.get("fieldValidation").is_some_and(|v| v == "Strict"),
            force: q.get("force").is_some_and(|v| v == "true"),
        }
    }
}

/// Validates and stores a new object.
pub async fn create(
    app: &App,
    info: &ResourceInfo,
    version: &str,
    ns: &str,
    mut obj: Value,
    ctx: &WriteCtx,
) -> Result<Arc<Value>, ApiError> {
    obj["apiVersion"] = json!(info.api_version(version));
    obj["kind"] = json!(info.kind);
    let m = meta_mut(&mut obj);
    if info.namespaced {
        match m.get("namespace").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                m.insert("namespace".into(), json!(ns));
            }
        }
    } else {
        m.remove("namespace");
    }
    let mut name = m
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        match m
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty())
        {
            Some(g) => {
                name = format!("{g}{}", objects::name_suffix());
                m.insert("name".into(), json!(name));
            }
            None => {
                return Err(ApiError::invalid(
                    &info.rref(),
                    "",
                    vec![Cause::new(
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )],
                ));
            }
        }
    }
    if let Some(c) = objects::validate_name(info, &name) {
        return Err(ApiError::invalid(&info.rref(), &name, vec![c]));
    }
    ensure_namespace(app, info, ns)?;
    objects::prepare_create(info, version, &mut obj);
    if info.is_custom() {
        objects::admit_custom(info, version, &mut obj, &name, ctx.strict)?;
    }
    let is_crd = is_crd(info);
    if is_crd {
        let causes = objects::validate_crd(&obj, &name);
        if !causes.is_empty() {
            return Err(ApiError::invalid(&info.rref(), &name, causes));
        }
    }
    if !ctx.manager.is_empty() {
        obj = machinery::record_update(info, version, Part::Main, None, obj, &ctx.manager);
    }
    let rref_info = info.clone();
    let n2 = name.clone();
    let outcome = app
        .store
        .write(
            &info.gr(),
            ns,
            &name,
            ctx.dry_run,
            Box::new(move |cur| match cur {
                Some(_) => Err(ApiError::already_exists(&rref_info.rref(), &n2)),
                None => Ok(Action::Put(obj)),
            }),
        )
        .await?;
    let v = outcome
        .object()
        .cloned()
        .ok_or_else(|| ApiError::internal("create returned nothing"))?;
    if is_crd && !ctx.dry_run {
        app.registry.upsert_crd(&v);
    }
    Ok(v)
}

fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}

/// What update and patch share: the object named on the URL, the part of it written
/// and the request's write options. Cloned into the write closure.
#[derive(Clone)]
struct Modify {
    info: ResourceInfo,
    version: String,
    name: String,
    part: Part,
    ctx: WriteCtx,
}

impl Modify {
    fn from_request(
        t: &Target,
        sub: Option<&str>,
        q: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Modify {
        Modify {
            info: t.info.clone(),
            version: t.version.clone(),
            name: t.name.clone().unwrap_or_default(),
            part: if sub == Some("status") {
                Part::Status
            } else {
                Part::Main
            },
            ctx: WriteCtx::from_request(q, headers),
        }
    }

    /// A body naming another object than the URL is refused, as upstream does.
    fn check_name(&self, body: &Value) -> Result<(), ApiError> {
        match meta_str(body, "name") {
            Some(n) if n != self.name => Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({})",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Runs `op` on the object, applies the write's side effects and returns whether it
    /// created the object, with the object.
    ///
    /// `op` runs here, against a snapshot, and the store commits its result only if the object
    /// is still that version (kube-apiserver's optimistic update loop); after a few lost races
    /// it runs on the store's writer, which always sees the latest version.
    async fn write(
        &self,
        app: &App,
        t: &Target,
        what: &str,
        op: impl Fn(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send + Sync + 'static,
    ) -> Result<(bool, Arc<Value>), ApiError> {
        const OPTIMISTIC_ATTEMPTS: usize = 3;
        let gr = self.info.gr();
        let mut done = None;
        for _ in 0..OPTIMISTIC_ATTEMPTS {
            let seen = app.store.snapshot(&gr, t.ns_str(), &self.name);
            // An error decided on a version read during the request is that request's answer.
            let action = op(seen.object.as_ref())?;
            if let Some(o) = app
                .store
                .write_if_current(&gr, t.ns_str(), &self.name, self.ctx.dry_run, seen, action)
                .await?
            {
                done = Some(o);
                break;
            }
        }
        let outcome = match done {
            Some(o) => o,
            None => {
                app.store
                    .write(&gr, t.ns_str(), &self.name, self.ctx.dry_run, Box::new(op))
                    .await?
            }
        };
        after_write(app, &self.info, &outcome);
        let v = outcome
            .object()
            .cloned()
            .ok_or_else(|| ApiError::internal(format!("{what} returned nothing")))?;
        Ok((matches!(outcome, Outcome::Created(_)), v))
    }
}

async fn update(app: &App, t: &Target, obj: Value, m: &Modify) -> Result<Arc<Value>, ApiError> {
    m.check_name(&obj)?;
    let m2 = m.clone();
    let (_, v) = m
        .write(app, t, "update", move |cur| {
            let m = &m2;
            let cur = cur.ok_or_else(|| ApiError::not_found(&m.info.rref(), &m.name))?;
            if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty())
                && Some(rv) != meta_str(cur, "resourceVersion")
            {
                return Err(ApiError::conflict(&m.info.rref(), &m.name));
            }
            finish(&m.info, &m.version, cur, obj.clone(), m.part, &m.ctx, true)
        })
        .await?;
    Ok(v)
}

/// Shared tail of update and patch: status separation, validation, no-op detection,
/// field ownership and finalizer-driven removal.
fn finish(
    info: &ResourceInfo,
    version: &str,
    cur: &Arc<Value>,
    new: Value,
    part: Part,
    ctx: &WriteCtx,
    record: bool,
) -> Result<Action, ApiError> {
    if is_crd(info) && part == Part::Main {
        let name = meta_str(cur, "name").unwrap_or("");
        let causes = objects::validate_crd(&new, name);
        if !causes.is_empty() {
            return Err(ApiError::invalid(&info.rref(), name, causes));
        }
    }
    match objects::finish_update(info, version, cur, new, part, ctx.strict)? {
        None => Ok(Action::Keep),
        Some(v) if objects::should_remove(&v) => Ok(Action::Delete),
        Some(v) if record && !ctx.manager.is_empty() => Ok(Action::Put(machinery::record_update(
            info,
            version,
            part,
            Some(cur),
            v,
            &ctx.manager,
        ))),
        Some(v) => Ok(Action::Put(v)),
    }
}

fn after_write(app: &App, info: &ResourceInfo, outcome: &Outcome) {
    if is_crd(info) {
        match outcome {
            Outcome::Updated(v) | Outcome::Created(v) => {
                app.registry.upsert_crd(v);
            }
            Outcome::Deleted(v) => {
                app.registry.remove_crd(v);
            }
            Outcome::Unchanged(_) => {}
        }
    }
}

async fn patch(
    app: &App,
    t: &Target,
    ct: &str,
    body: &[u8],
    q: &HashMap<String, String>,
    m: &Modify,
) -> Result<(u16, Arc<Value>), ApiError> {
    let name = &m.name;
    let keys = machinery::merge_keys(&t.info, &t.version);
    let unsupported = || {
        ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
            if t.info.is_custom() {
                ""
            } else {
                ", application/strategic-merge-patch+json"
            }
        ))
    };
    let pt = PatchType::from_content_type(ct).ok_or_else(unsupported)?;
    if pt == PatchType::StrategicMerge && (t.info.is_custom() || keys.is_none()) {
        return Err(unsupported());
    }
    let keys = keys.unwrap_or_else(machinery::metadata_keys);
    let patch_doc: Value = match pt {
        PatchType::Apply => {
            let y: serde_yaml::Value = serde_yaml::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            serde_json::to_value(y)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
        }
        _ => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?,
    };
    if pt == PatchType::Apply {
        if q.get("fieldManager").is_none_or(|m| m.is_empty()) {
            return Err(ApiError::bad_request(
                "PATCH requests with apply-patch+yaml must have a fieldManager",
            ));
        }
        if !patch_doc.is_object() {
            return Err(ApiError::bad_request(
                "the applied configuration must be an object",
            ));
        }
        m.check_name(&patch_doc)?;
    }
    // An apply may create: check what create would check before queueing.
    let creating =
        pt == PatchType::Apply && app.store.get(&t.info.gr(), t.ns_str(), name).is_none();
    if creating {
        if let Some(c) = objects::validate_name(&t.info, name) {
            return Err(ApiError::invalid(&t.info.rref(), name, vec![c]));
        }
        ensure_namespace(app, &t.info, t.ns_str())?;
    }
    let ns = t.ns.clone();
    let m2 = m.clone();
    let (created, v) = m
        .write(app, t, "patch", move |cur| {
            let Modify {
                info,
                version,
                name: n2,
                part,
                ctx: c2,
            } = &m2;
            let (part, ns) = (*part, ns.clone());
            let Some(cur) = cur else {
                if pt != PatchType::Apply {
                    return Err(ApiError::not_found(&info.rref(), n2));
                }
                let mut obj = machinery::server_side_apply(
                    info,
                    version,
                    part,
                    None,
                    &patch_doc,
                    &c2.manager,
                    c2.force,
                )?;
                obj["apiVersion"] = json!(info.api_version(version));
                obj["kind"] = json!(info.kind);
                let m = meta_mut(&mut obj);
                m.insert("name".into(), json!(n2));
                if let Some(ns) = &ns {
                    m.insert("namespace".into(), json!(ns));
                }
                objects::prepare_create(info, version, &mut obj);
                if info.is_custom() {
                    objects::admit_custom(info, version, &mut obj, n2, c2.strict)?;
                }
                return Ok(Action::Put(obj));
            };
            let base = out(info, version, cur);
            let (patched, record) = match pt {
                PatchType::Apply => (
                    machinery::server_side_apply(
                        info,
                        version,
                        part,
                        Some(&base),
                        &patch_doc,
                        &c2.manager,
                        c2.force,
                    )?,
                    false,
                ),
                _ => (machinery::patch(base, pt, &patch_doc, &keys)?, true),
            };
            // A resourceVersion in the request is a precondition, for applies too (their
            // result does not carry it, so it is read from the applied configuration).
            let requested = if pt == PatchType::Apply {
                meta_str(&patch_doc, "resourceVersion")
            } else {
                meta_str(&patched, "resourceVersion")
            };
            if let Some(rv) = requested.filter(|rv| !rv.is_empty())
                && Some(rv) != meta_str(cur, "resourceVersion")
            {
                return Err(ApiError::conflict(&info.rref(), n2));
            }
            finish(info, version, cur, patched, part, c2, record)
        })
        .await?;
    Ok((if created { 201 } else { 200 }, v))
}

/// The parts of DeleteOptions this server honours.
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    pub dry_run: bool,
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub rv: Option<String>,
}

impl DeleteOpts {
    /// Reads options from the query and a JSON body; other bodies (protobuf) are ignored.
    fn parse(q: &HashMap<String, String>, body: &[u8]) -> DeleteOpts {
        let b: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let orphan = b.get("orphanDependents").and_then(Value::as_bool) == Some(true);
        DeleteOpts {
            dry_run: dry_run(q)
                || b.get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x == "All")),
            propagation: q
                .get("propagationPolicy")
                .cloned()
                .or_else(|| {
                    b.get("propagationPolicy")
                        .and_then(Value::as_str)
                        .map(String::from)
                })
                .or_else(|| orphan.then(|| "Orphan".to_string())),
            uid: b
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(String::from),
            rv: b
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
        }
    }
}

/// Deletes an object, or marks it for deletion while finalizers remain.
pub async fn delete(
    app: &App,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: DeleteOpts,
) -> Result<Outcome, ApiError> {
    if opts.propagation.as_deref() == Some("Orphan")
        && let Some(uid) = app
            .store
            .get(&info.gr(), ns, name)
            .and_then(|v| meta_str(&v, "uid").map(String::from))
    {
        app.orphaned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid);
    }
    let i2 = info.clone();
    let n2 = name.to_string();
    let o2 = opts.clone();
    let outcome = app
        .store
        .write(
            &info.gr(),
            ns,
            name,
            opts.dry_run,
            Box::new(move |cur| {
                let cur = cur.ok_or_else(|| ApiError::not_found(&i2.rref(), &n2))?;
                if let Some(uid) = &o2.uid
                    && Some(uid.as_str()) != meta_str(cur, "uid")
                {
                    return Err(ApiError::conflict_msg(&i2.rref(), &n2, &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(cur, "uid").unwrap_or("")
                    )));
                }
                if let Some(rv) = &o2.rv
                    && Some(rv.as_str()) != meta_str(cur, "resourceVersion")
                {
                    return Err(ApiError::conflict_msg(&i2.rref(), &n2, &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta_str(cur, "resourceVersion").unwrap_or("")
                    )));
                }
                // Foreground: the owner stays, marked and holding the finalizer, until
                // the garbage collector has removed its blocking dependents.
                let foreground = o2.propagation.as_deref() == Some("Foreground");
                let finalizers = meta(cur).get("finalizers").and_then(Value::as_array);
                let has_finalizers = finalizers.is_some_and(|f| !f.is_empty());
                let has_foreground = finalizers.is_some_and(|f| f.iter().any(|x| x == FOREGROUND));
                if !has_finalizers && !foreground {
                    return Ok(Action::Delete);
                }
                let deleting = meta(cur).get("deletionTimestamp").is_some_and(|d| !d.is_null());
                if deleting && (!foreground || has_foreground) {
                    return Ok(Action::Keep);
                }
                let mut v = (**cur).clone();
                let m = meta_mut(&mut v);
                if !deleting {
                    m.insert("deletionTimestamp".into(), json!(objects::now_rfc3339()));
                    m.insert("deletionGracePeriodSeconds".into(), json!(0));
                }
                if foreground && !has_foreground {
                    match m.get_mut("finalizers").and_then(Value::as_array_mut) {
                        Some(f) => f.push(json!(FOREGROUND)),
                        None => {
                            m.insert("finalizers".into(), json!([FOREGROUND]));
                        }
                    }
                }
                m.remove("resourceVersion");
                Ok(Action::Put(v))
            }),
        )
        .await?;
    after_write(app, info, &outcome);
    Ok(outcome)
}

async fn delete_collection(
    app: &App,
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let filter = Filter::parse(t, q)?;
    let (_, items, _) = app
        .store
        .list(&t.info.gr(), t.ns.as_deref(), None, None, &|v| {
            filter.matches(v)
        });
    let opts = DeleteOpts::parse(q, body);
    let mut deleted = Vec::new();
    for v in items {
        let ns = meta_str(&v, "namespace").unwrap_or("").to_string();
        let name = meta_str(&v, "name").unwrap_or("").to_string();
        match delete(app, &t.info, &ns, &name, opts.clone()).await {
            Ok(o) => deleted.extend(o.object().map(|v| out(&t.info, &t.version, v))),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let _ = headers;
    Ok(json_response(
        200,
        &json!({"kind": t.info.list_kind, "apiVersion": t.info.api_version(&t.version),
            "metadata": {"resourceVersion": app.store.current_rv().to_string()}, "items": deleted}),
    ))
}

async fn evict(app: &App, t: &Target, body: &[u8]) -> Result<Response, ApiError> {
    let ns = t.ns_str().to_string();
    let name = t.name.clone().unwrap_or_default();
    let ev: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(n) = meta_str(&ev, "name").filter(|n| !n.is_empty() && *n != name) {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object: {n}"
        )));
    }
    let _guard = app.evict_lock.lock().await;
    let pod = app
        .store
        .get("/pods", &ns, &name)
        .ok_or_else(|| ApiError::not_found(&t.info.rref(), &name))?;
    let success = || {
        json_response(
            201,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    };
    if meta(&pod)
        .get("deletionTimestamp")
        .is_some_and(|d| !d.is_null())
    {
        return Ok(success());
    }
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    let ignore_pdb = matches!(phase, "Succeeded" | "Failed" | "Pending");
    if !ignore_pdb {
        let (_, pdbs, _) = app.store.list(
            "policy/poddisruptionbudgets",
            Some(&ns),
            None,
            None,
            &|pdb| crate::controllers::pdb_selects(pdb, &pod),
        );
        if pdbs.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = pdbs.first() {
            let st = crate::controllers::pdb_status(&app.store, pdb);
            let allowed = st["disruptionsAllowed"].as_i64().unwrap_or(0);
            let healthy = crate::controllers::pod_ready(&pod);
            if healthy && allowed <= 0 {
                let pdb_name = meta_str(pdb, "name").unwrap_or("");
                return Err(ApiError::new(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
                    .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": format!(
                        "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                        st["desiredHealthy"].as_i64().unwrap_or(0), st["currentHealthy"].as_i64().unwrap_or(0))}]})));
            }
        }
    }
    let dry = ev
        .pointer("/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"));
    let opts = DeleteOpts {
        dry_run: dry,
        ..Default::default()
    };
    let info = app
        .registry
        .lookup("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not registered"))?;
    match delete(app, &info, &ns, &name, opts).await {
        Ok(_) => Ok(success()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
