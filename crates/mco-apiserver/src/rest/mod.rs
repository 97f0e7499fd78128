//! The HTTP surface: routing, authentication, and the verbs on resources.
//!
//! Here: the [`App`] every handler shares, routing a request to its [`Target`] and the verb's
//! handler. The verbs are laid out as kube-apiserver's handlers are: [`list`], [`watch`],
//! [`write`] (create, update, patch), [`delete`] and [`evict`]; [`scale`] serves the `scale`
//! subresource through the object's own writes; [`encode`] reads request bodies and writes
//! responses.

mod delete;
mod encode;
mod evict;
mod list;
mod review;
mod scale;
mod watch;
mod write;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, header};
use serde_json::json;

use crate::admission::Write;
use crate::auth::{Identity, node_guard};
use crate::discovery::{self, DiscoveryFormat};
use crate::error::ApiError;
use crate::rbac;
use crate::registry::{Registry, ResourceInfo};
use crate::store::Store;

pub use delete::{DeleteOpts, FOREGROUND, ORPHAN, delete};
pub(crate) use scale::served as scale_served;
pub use write::{WriteCtx, create};

use delete::delete_collection;
use encode::{
    ServedText, decode_object, json_response, object_response, typed_json, typed_response,
    wants_table,
};
use evict::evict;
use list::list;
use watch::watch;
use write::{Modify, patch, update};

/// Everything a request handler needs.
pub struct App {
    pub store: Arc<Store>,
    pub registry: Registry,
    /// Evictions check budgets and delete in one step; serialising them keeps two
    /// concurrent evictions from spending the same disruption.
    pub evict_lock: tokio::sync::Mutex<()>,
    pub addr: SocketAddr,
    pub metrics: crate::metrics::Metrics,
    pub rbac: crate::auth::PolicyCache,
    pub tokens: crate::auth::Tokens,
    /// Verifies client certificates ([`crate::client_cert`]).
    pub client_ca: crate::client_cert::ClientCa,
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

fn parse_query(uri: &http::Uri) -> HashMap<String, String> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0.into_iter().collect())
        .unwrap_or_default()
}

/// kube-apiserver's union of authenticators, in its order: the client certificate, then the
/// bearer token; the first that authenticates wins. `None` when the request carries neither
/// (anonymous); 401 when one was presented and none authenticates (a refused certificate
/// without a token, or a token this server does not know).
fn authenticate(
    app: &App,
    headers: &HeaderMap,
    peer: Option<&crate::client_cert::PeerChain>,
) -> Result<Option<Identity>, ApiError> {
    let mut refused = false;
    if let Some(chain) = peer {
        match app.client_ca.authenticate(&chain.0) {
            Ok(Some(id)) => return Ok(Some(id)),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "client certificate refused");
                refused = true;
            }
        }
    }
    let Some(h) = headers.get(header::AUTHORIZATION) else {
        return if refused {
            Err(ApiError::unauthorized())
        } else {
            Ok(None)
        };
    };
    let token = h
        .to_str()
        .ok()
        .and_then(|s| s.strip_prefix("Bearer "))
        .map(str::trim);
    match token.and_then(|t| app.tokens.identity_for(t)) {
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
    let caller = authenticate(
        app,
        &headers,
        req.extensions().get::<crate::client_cert::PeerChain>(),
    )?;
    if caller.is_none() && !public {
        return Err(ApiError::unauthorized());
    }
    let identity = match (crate::impersonation::wanted(&headers)?, caller) {
        // Checked before routing, as kube-apiserver's filter runs before its handlers.
        (Some(w), caller) => {
            let attrs = attributes_of(app, &method, &segs_ref, &query, uri.path());
            crate::impersonation::impersonate(&app.rbac, &app.store, caller.as_ref(), &w, &attrs)?
        }
        (None, Some(id)) => id,
        (None, None) => Identity::Admin,
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
    // Discovery, OpenAPI and /version reads count in `apiserver_request_total` as kube-apiserver
    // counts a non-resource request: the verb, no group or resource, the path as subresource.
    let non_resource = matches!(
        segs_ref.as_slice(),
        ["version"]
            | ["api"]
            | ["apis"]
            | ["api", _]
            | ["apis", _]
            | ["apis", _, _]
            | ["openapi", ..]
    );
    if non_resource {
        let r = non_resource_route(app, &method, &segs_ref, &accept, &query, &headers);
        let labels = crate::metrics::RequestLabels {
            verb: method.as_str().to_string(),
            group: String::new(),
            resource: String::new(),
            subresource: uri.path().to_string(),
            code: match &r {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(e) => e.code.to_string(),
            },
        };
        app.metrics.requests.get_or_create(&labels).inc();
        return r;
    }
    match segs_ref.as_slice() {
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

/// The RBAC attributes of a request: of its resource when the path names a served one, else
/// of its path (verb: the method in lower case), as kube's request info parses them.
fn attributes_of(
    app: &App,
    method: &Method,
    segs: &[&str],
    q: &HashMap<String, String>,
    path: &str,
) -> rbac::Request {
    let target = match segs {
        ["api", v, rest @ ..] if !rest.is_empty() => resolve(app, "", v, rest).ok(),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => resolve(app, g, v, rest).ok(),
        _ => None,
    };
    match target {
        Some(t) => request_attributes(method, &t, q),
        None => rbac::Request {
            verb: method.as_str().to_lowercase(),
            path: Some(path.to_string()),
            ..Default::default()
        },
    }
}

/// `/version`, discovery (`/api`, `/apis`, their groups and versions) and OpenAPI: GET only.
fn non_resource_route(
    app: &Arc<App>,
    method: &Method,
    segs: &[&str],
    accept: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let get_only = |r: Response| {
        if *method == Method::GET {
            Ok(r)
        } else {
            Err(ApiError::method_not_allowed())
        }
    };
    match segs {
        ["version"] => get_only(json_response(200, &discovery::version_info())),
        ["api"] => {
            let f = discovery::negotiate(accept);
            let body = match f {
                DiscoveryFormat::Legacy => discovery::legacy_api(&app.addr.to_string()),
                _ => discovery::aggregated(&app.registry, true, f),
            };
            get_only(typed_response(&body, discovery::content_type(f)))
        }
        ["apis"] => {
            let f = discovery::negotiate(accept);
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
        ["openapi", "v3", rest @ ..] => openapi_doc(app, &rest.join("/"), query),
        ["openapi", "v2"] => get_only(openapi_v2_doc(app, accept, headers)),
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

/// `GET /openapi/v2` as kube-apiserver serves it: the encoding `Accept` picks (406 if none),
/// `ETag` the same for both encodings, 304 for a client that has it.
fn openapi_v2_doc(app: &App, accept: &str, headers: &HeaderMap) -> Response {
    use crate::openapi_v2::{Encoding, PROTOBUF, negotiate, not_modified};
    let Some(encoding) = negotiate(accept) else {
        return (
            StatusCode::NOT_ACCEPTABLE,
            [(header::VARY, "Accept")],
            Bytes::new(),
        )
            .into_response();
    };
    let doc = crate::openapi_v2::document(&discovery::openapi(&app.registry));
    let (content_type, body) = match encoding {
        Encoding::Json => ("application/json", doc.json.clone()),
        Encoding::Protobuf => (PROTOBUF, doc.protobuf.clone()),
    };
    let cached = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| not_modified(v, &doc.etag));
    let validators = [
        (header::VARY, "Accept".to_string()),
        (header::ETAG, doc.etag.clone()),
        (header::LAST_MODIFIED, doc.last_modified.clone()),
    ];
    if cached {
        return (StatusCode::NOT_MODIFIED, validators).into_response();
    }
    (
        StatusCode::OK,
        validators,
        [(header::CONTENT_TYPE, content_type)],
        body,
    )
        .into_response()
}

fn openapi_doc(app: &App, key: &str, q: &HashMap<String, String>) -> Result<Response, ApiError> {
    let all = discovery::openapi(&app.registry);
    let doc = all
        .document_json(key)
        .ok_or_else(ApiError::not_found_path)?;
    let mut r = typed_json(200, doc.to_vec());
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
        Some(s) if subresource_served(&info, version, s) => {}
        // kube-apiserver's CRD handler takes every subresource path of a named custom object
        // and, once the request is authorized, answers an unserved one as the object not found.
        Some(_) if info.is_custom() && name.is_some() => {}
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

/// Whether `sub` is a subresource `info` serves at `version`.
fn subresource_served(info: &ResourceInfo, version: &str, sub: &str) -> bool {
    match sub {
        "status" => info.has_status(version),
        "eviction" => info.eviction,
        "token" => crate::discovery::issues_tokens(info),
        "scale" => scale::served(info, version),
        _ => false,
    }
}

/// kube's verb for a resource request.
fn verb(method: &Method, named: bool, q: &HashMap<String, String>) -> &'static str {
    let watch = q.get("watch").is_some_and(|w| w == "1" || w == "true");
    match (method, named) {
        (&Method::GET | &Method::HEAD, true) => "get",
        (&Method::GET | &Method::HEAD, false) if watch => "watch",
        (&Method::GET | &Method::HEAD, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "",
    }
}

/// The RBAC attributes of a request on `t`. A list or watch whose field selector pins
/// `metadata.name` counts as naming that object, as kube-apiserver does, so resourceNames
/// rules can grant watching one object.
fn request_attributes(method: &Method, t: &Target, q: &HashMap<String, String>) -> rbac::Request {
    let name = t.name.clone().unwrap_or_else(|| {
        q.get("fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name="))
            .filter(|n| !n.contains(','))
            .unwrap_or_default()
            .to_string()
    });
    rbac::Request {
        verb: verb(method, t.name.is_some(), q).to_string(),
        api_group: t.info.group.clone(),
        resource: t.info.plural.clone(),
        subresource: t.sub.clone(),
        name,
        namespace: t.ns.clone().unwrap_or_default(),
        path: None,
    }
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
    crate::auth::authorize(&app.rbac, &app.store, id, || {
        request_attributes(method, &t, q)
    })?;
    if let (Some(sub), Some(name)) = (t.sub.as_deref(), t.name.as_deref())
        && !subresource_served(&t.info, &t.version, sub)
    {
        return Err(ApiError::not_found(&t.info.rref(), name));
    }
    if t.info.review {
        return review::review(app, method, &t, id, q, headers, &body).await;
    }
    let is_write = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    // By the name on the URL, before the body is read; the objects themselves are checked
    // where the write decides what it stores.
    if is_write
        && let Some(name) = t.name.as_deref()
        && let Some(msg) = node_guard(
            id,
            &Write {
                group: &t.info.group,
                plural: &t.info.plural,
                status: t.sub.as_deref() == Some("status"),
                name,
                old: None,
                new: None,
            },
        )
    {
        return Err(ApiError::forbidden(msg));
    }
    match (method, t.name.is_some(), t.sub.as_deref()) {
        (&Method::GET, true, Some("scale")) => {
            let v = scale::get(app, &t)?;
            if wants_table(headers) {
                let include =
                    crate::tables::Include::parse(q.get("includeObject").map(String::as_str));
                return Ok(json_response(200, &scale::table(&t.info, &v, include)));
            }
            Ok(json_response(200, &v))
        }
        (&Method::PUT, true, Some("scale")) => {
            let obj = decode_object(headers, &body, "Scale")?;
            let m = Modify::from_request(&t, None, q, headers, id);
            let v = scale::write(app, &t, &m, scale::ScaleWrite::Put(obj)).await?;
            Ok(json_response(200, &v))
        }
        (&Method::PATCH, true, Some("scale")) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let m = Modify::from_request(&t, None, q, headers, id);
            let (pt, doc) = write::patch_document(&t, ct, &body, q)?;
            let v = scale::write(app, &t, &m, scale::ScaleWrite::Patch(pt, doc)).await?;
            Ok(json_response(200, &v))
        }
        (&Method::GET, false, _) => {
            if q.get("watch").is_some_and(|w| w == "1" || w == "true") {
                watch(app, &t, q, headers)
            } else {
                list(app, &t, q, headers)
            }
        }
        (&Method::GET, true, _) => {
            let name = t.name.as_deref().unwrap_or("");
            let gr = t.info.gr();
            let text = app
                .store
                .text(&gr, t.ns_str(), name)
                .ok_or_else(|| ApiError::not_found(&t.info.rref(), name))?;
            // Text is served as stored only in the stored schema.
            if !wants_table(headers)
                && !crate::event::converts(&t.info)
                && let Ok(body) =
                    serde_json::to_vec(&ServedText::new(&t.info, &t.version, &text, t.slim))
            {
                return Ok(typed_json(200, body));
            }
            // A Table needs the parsed object; so does text the fast path could not split
            // (nested past serde_json's limit), and damaged text is named in an error.
            let v = app
                .store
                .get_checked(&gr, t.ns_str(), name)?
                .ok_or_else(|| ApiError::not_found(&t.info.rref(), name))?;
            Ok(object_response(&t, headers, q, 200, &v))
        }
        (&Method::POST, false, None) => {
            if t.info.namespaced && t.ns.is_none() {
                return Err(ApiError::not_found_path());
            }
            let obj = decode_object(headers, &body, &t.info.kind)?;
            let ctx = WriteCtx::from_request(q, headers, id);
            let v = create(app, &t.info, &t.version, t.ns_str(), obj, &ctx).await?;
            Ok(warned(&t, &v, object_response(&t, headers, q, 201, &v)))
        }
        (&Method::POST, true, Some("eviction")) => evict(app, &t, &body).await,
        (&Method::POST, true, Some("token")) => {
            let name = t.name.as_deref().unwrap_or("");
            let v = crate::token_request::create(app, t.ns_str(), name, &body).await?;
            Ok(json_response(201, &v))
        }
        (&Method::PUT, true, sub) => {
            let obj = decode_object(headers, &body, &t.info.kind)?;
            let m = Modify::from_request(&t, sub, q, headers, id);
            // A PUT that creates needs the create verb too.
            let may_create = || {
                crate::auth::authorize(&app.rbac, &app.store, id, || rbac::Request {
                    verb: "create".into(),
                    ..request_attributes(method, &t, q)
                })
            };
            let (code, v) = update(app, &t, obj, &m, may_create).await?;
            Ok(warned(&t, &v, object_response(&t, headers, q, code, &v)))
        }
        (&Method::PATCH, true, sub) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let m = Modify::from_request(&t, sub, q, headers, id);
            let (code, v) = patch(app, &t, ct, &body, q, &m).await?;
            Ok(warned(&t, &v, object_response(&t, headers, q, code, &v)))
        }
        (&Method::DELETE, true, None) => {
            let name = t.name.clone().unwrap_or_default();
            let opts = DeleteOpts::parse(q, &body);
            // kube-apiserver answers 202 when `orphanDependents: false` leaves the object
            // in place (it kept that for the field's old clients only).
            let kept_code = if opts.orphan_dependents == Some(false) {
                202
            } else {
                200
            };
            let outcome = delete(app, &t.info, t.ns_str(), &name, opts).await?;
            let code = match outcome {
                crate::store::Outcome::Deleted(_) => 200,
                _ => kept_code,
            };
            let v = outcome
                .object()
                .cloned()
                .unwrap_or_else(|| Arc::new(json!({})));
            Ok(object_response(&t, headers, q, code, &v))
        }
        (&Method::DELETE, false, None) => delete_collection(app, &t, q, headers, &body).await,
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `resp` with the `Warning` headers kube-apiserver adds for the object a write accepted.
fn warned(t: &Target, v: &serde_json::Value, mut resp: Response) -> Response {
    for w in crate::secret::warnings(&t.info, v) {
        if let Ok(h) = http::HeaderValue::from_str(&crate::secret::warning_header(&w)) {
            resp.headers_mut().append(http::header::WARNING, h);
        }
    }
    resp
}
