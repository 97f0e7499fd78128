//! CREATE, UPDATE and PATCH (server-side apply included): validation, field ownership, and
//! the optimistic write loop.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, header};
use mco_apimachinery::defaults;
use mco_apimachinery::patch::PatchType;
use serde_json::{Value, json};

use super::encode::typed;
use super::{App, Target, dry_run};
use crate::admission::{self, Write};
use crate::auth::Identity;
use crate::error::{ApiError, Cause, ResRef};
use crate::event;
use crate::machinery;
use crate::objects::{self, Part, meta_mut, meta_str};
use crate::registry::ResourceInfo;
use crate::secret;
use crate::store::{Action, Outcome, Store};
use crate::strategy;

/// A new object as it would be stored, by create or by an apply that creates: `stringData`
/// folded, a Secret's type defaulted, server-set fields filled, a custom resource admitted by its
/// schema, and a Secret or an Event validated.
fn admit_new(
    info: &ResourceInfo,
    version: &str,
    obj: &mut Value,
    name: &str,
    strict: bool,
) -> Result<(), ApiError> {
    objects::fold_string_data(info, obj)?;
    secret::default_type(info, obj);
    objects::default_core(info, obj);
    objects::prepare_create(info, version, obj);
    if info.group.is_empty() && info.plural == "pods" {
        defaults::on_pod_create(obj, &objects::name_suffix());
    }
    if info.is_custom() {
        objects::admit_custom(info, version, obj, name, strict)?;
    }
    let mut causes = secret::validate(info, obj);
    causes.extend(event::validate(info, version, obj));
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.rref(), name, causes));
    }
    Ok(())
}

fn ensure_namespace(store: &Store, info: &ResourceInfo, ns: &str) -> Result<(), ApiError> {
    if info.namespaced && store.get("/namespaces", "", ns).is_none() {
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
    /// The node a node-bound requester acts for: its writes pass the node guard.
    pub node: Option<String>,
}

impl WriteCtx {
    pub(super) fn from_request(
        q: &HashMap<String, String>,
        headers: &HeaderMap,
        id: &Identity,
    ) -> WriteCtx {
        let ua = headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        WriteCtx {
            dry_run: dry_run(q),
            manager: machinery::manager_for(q.get("fieldManager").map(String::as_str), ua),
            strict: q.get("fieldValidation").is_some_and(|v| v == "Strict"),
            force: q.get("force").is_some_and(|v| v == "true"),
            node: id.node().map(String::from),
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
    objects::created_generation(info, version, &mut obj)?;
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
    let causes = objects::validate_meta(&obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.rref(), &name, causes));
    }
    // After the name is generated: a node may not create another node's object under a
    // generateName, nor one whose node reference names another node.
    if let Some(node) = &ctx.node
        && let Some(msg) = admission::node_guard(
            node,
            &Write {
                group: &info.group,
                plural: &info.plural,
                status: false,
                name: &name,
                old: None,
                new: Some(&obj),
            },
        )
    {
        return Err(ApiError::forbidden(msg));
    }
    ensure_namespace(&app.store, info, ns)?;
    admit_new(info, version, &mut obj, &name, ctx.strict)?;
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
    let obj = event::to_storage(info, obj);
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
pub(super) struct Modify {
    pub(super) info: ResourceInfo,
    pub(super) version: String,
    pub(super) name: String,
    part: Part,
    pub(super) ctx: WriteCtx,
}

impl Modify {
    pub(super) fn from_request(
        t: &Target,
        sub: Option<&str>,
        q: &HashMap<String, String>,
        headers: &HeaderMap,
        id: &Identity,
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
            ctx: WriteCtx::from_request(q, headers, id),
        }
    }

    /// A body naming another object than the URL is refused, as upstream does.
    pub(super) fn check_name(&self, body: &Value) -> Result<(), ApiError> {
        match meta_str(body, "name") {
            Some(n) if n != self.name => Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({})",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// A PUT's body names the object of the URL, in its namespace, as upstream requires.
    pub(super) fn check_put(&self, body: &Value, ns: Option<&str>) -> Result<(), ApiError> {
        let sent = meta_str(body, "namespace").filter(|n| !n.is_empty());
        if self.info.namespaced
            && let (Some(sent), Some(ns)) = (sent, ns)
            && sent != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        match meta_str(body, "name").filter(|n| !n.is_empty()) {
            None => Err(ApiError::bad_request(format!(
                "the name of the object ({} based on URL) was undeterminable: name must be provided",
                self.name
            ))),
            Some(_) => self.check_name(body),
        }
    }

    /// Runs `op` on the object, applies the write's side effects and returns whether it
    /// created the object, with the object.
    ///
    /// `op` runs here, against a snapshot, and the store commits its result only if the object
    /// is still that version (kube-apiserver's optimistic update loop); after a few lost races
    /// it runs on the store's writer, which always sees the latest version.
    pub(super) async fn write(
        &self,
        app: &App,
        t: &Target,
        what: &str,
        op: impl Fn(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send + Sync + 'static,
    ) -> Result<(bool, Arc<Value>), ApiError> {
        const OPTIMISTIC_ATTEMPTS: usize = 3;
        let op = stored_form(&self.info, self.guarded(op));
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

/// A write's step that may run more than once (see [`Modify::write`]).
type RepeatableOp = Box<dyn Fn(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send + Sync>;

/// `op` on the object in `info`'s schema, its result put in the stored one: an
/// `events.k8s.io` Event is read, changed and judged as that API's, and stored as a core Event;
/// a core Event is stored as Go writes it.
fn stored_form(
    info: &ResourceInfo,
    op: impl Fn(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send + Sync + 'static,
) -> RepeatableOp {
    if !event::is_event(info) {
        return Box::new(op);
    }
    let info = info.clone();
    Box::new(move |cur| {
        let seen = cur.map(|c| Arc::new(event::from_storage(&info, c).into_owned()));
        Ok(match op(seen.as_ref())? {
            Action::Put(v) => Action::Put(event::to_storage(&info, v)),
            other => other,
        })
    })
}

impl Modify {
    /// `op`, then the node guard on what it would store, against the version it read.
    fn guarded(
        &self,
        op: impl Fn(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send + Sync + 'static,
    ) -> impl Fn(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send + Sync + 'static {
        // Copied only for a node's request: the controller's writes pay nothing.
        let guard = self.ctx.node.clone().map(|node| {
            let (group, plural) = (self.info.group.clone(), self.info.plural.clone());
            (
                node,
                group,
                plural,
                self.name.clone(),
                self.part == Part::Status,
            )
        });
        move |cur| {
            let action = op(cur)?;
            if let (Some((node, group, plural, name, status)), Action::Put(new)) = (&guard, &action)
            {
                let w = Write {
                    group,
                    plural,
                    status: *status,
                    name,
                    old: cur.map(|c| c.as_ref()),
                    new: Some(new),
                };
                if let Some(msg) = admission::node_guard(node, &w) {
                    return Err(ApiError::forbidden(msg));
                }
            }
            Ok(action)
        }
    }
}

/// A PUT: replaces the object, or creates it where the kind's strategy allows that
/// (kube-apiserver's `AllowCreateOnUpdate`: Events, Leases, RBAC objects), checked as a create
/// is and only for a caller `may_create` allows; other kinds answer 404. Returns the HTTP
/// status, 201 for a create.
pub(super) async fn update(
    app: &App,
    t: &Target,
    obj: Value,
    m: &Modify,
    may_create: impl FnOnce() -> Result<(), ApiError>,
) -> Result<(u16, Arc<Value>), ApiError> {
    m.check_put(&obj, t.ns.as_deref())?;
    let obj = event::decoded(&m.info, obj);
    let creates = m.part == Part::Main && strategy::of(&m.info).create_on_update;
    // Decided once, before the write: the closure may run more than once.
    let on_missing: Option<Result<(), ApiError>> = creates.then(may_create);
    let store = Arc::clone(&app.store);
    let ns = t.ns.clone();
    let m2 = m.clone();
    let (created, v) = m
        .write(app, t, "update", move |cur| {
            let m = &m2;
            let Some(cur) = cur else {
                return match &on_missing {
                    None => Err(ApiError::not_found(&m.info.rref(), &m.name)),
                    // kube checks the uid against the empty object it would create.
                    Some(may) => {
                        check_uid(&m.info, ns.as_deref(), &m.name, &obj, None)?;
                        create_on_update(&store, m, ns.as_deref(), obj.clone(), may)
                    }
                };
            };
            check_uid(&m.info, ns.as_deref(), &m.name, &obj, Some(cur))?;
            if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty())
                && Some(rv) != meta_str(cur, "resourceVersion")
            {
                return Err(ApiError::conflict(&m.info.rref(), &m.name));
            }
            finish(&m.info, &m.version, cur, obj.clone(), m.part, &m.ctx, true)
        })
        .await?;
    Ok((if created { 201 } else { 200 }, v))
}

/// A PUT whose body names a uid is a precondition on the stored object's (kube's
/// `defaultUpdatedObjectInfo.Preconditions`), checked before anything else of the update; a
/// mismatch is kube's 409, worded by its storage layer, etcd key included.
pub(super) fn check_uid(
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    body: &Value,
    cur: Option<&Arc<Value>>,
) -> Result<(), ApiError> {
    let Some(sent) = meta_str(body, "uid").filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    let stored = cur.and_then(|c| meta_str(c, "uid")).unwrap_or("");
    if sent == stored {
        return Ok(());
    }
    let key = storage_key(info, ns, name);
    Err(ApiError::conflict_msg(
        &info.rref(),
        name,
        &format!(
            "StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {sent}, UID in object meta: {stored}"
        ),
    ))
}

/// The etcd key kube-apiserver keeps an object under (default `/registry` prefix): built-in
/// resources under their plural, a few under the historical names kube compiles in, and the
/// apiextensions-apiserver's (CRDs and custom resources) under `group/plural`.
fn storage_key(info: &ResourceInfo, ns: Option<&str>, name: &str) -> String {
    let prefix = match (info.group.as_str(), info.plural.as_str()) {
        ("", "nodes") => "minions".to_string(),
        ("", "services") => "services/specs".to_string(),
        ("", "endpoints") => "services/endpoints".to_string(),
        ("", "replicationcontrollers") => "controllers".to_string(),
        ("networking.k8s.io" | "extensions", "ingresses") => "ingress".to_string(),
        (group, plural) if info.crd.is_some() || group == "apiextensions.k8s.io" => {
            format!("{group}/{plural}")
        }
        (_, plural) => plural.to_string(),
    };
    match ns.filter(|_| info.namespaced) {
        Some(ns) => format!("/registry/{prefix}/{ns}/{name}"),
        None => format!("/registry/{prefix}/{name}"),
    }
}

/// The object a PUT of a missing one creates: the request's metadata that only the server
/// sets is dropped (a resourceVersion too: there is nothing to compare it with), then it is
/// judged as a create is, in kube-apiserver's order: the namespace, the object, then whether
/// the caller may create.
fn create_on_update(
    store: &Store,
    m: &Modify,
    ns: Option<&str>,
    mut obj: Value,
    may_create: &Result<(), ApiError>,
) -> Result<Action, ApiError> {
    let info = &m.info;
    ensure_namespace(store, info, ns.unwrap_or(""))?;
    obj["apiVersion"] = json!(info.api_version(&m.version));
    obj["kind"] = json!(info.kind);
    objects::created_generation(info, &m.version, &mut obj)?;
    let meta = meta_mut(&mut obj);
    meta.insert("name".into(), json!(m.name));
    match ns {
        Some(ns) if info.namespaced => {
            meta.insert("namespace".into(), json!(ns));
        }
        _ => {
            meta.remove("namespace");
        }
    }
    if let Some(c) = objects::validate_name(info, &m.name) {
        return Err(ApiError::invalid(&info.rref(), &m.name, vec![c]));
    }
    let causes = objects::validate_meta(&obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.rref(), &m.name, causes));
    }
    admit_new(info, &m.version, &mut obj, &m.name, m.ctx.strict)?;
    may_create.clone()?;
    if !m.ctx.manager.is_empty() {
        obj = machinery::record_update(info, &m.version, Part::Main, None, obj, &m.ctx.manager);
    }
    Ok(Action::Put(obj))
}

/// Shared tail of update and patch: status separation, validation, no-op detection,
/// field ownership and finalizer-driven removal.
pub(super) fn finish(
    info: &ResourceInfo,
    version: &str,
    cur: &Arc<Value>,
    mut new: Value,
    part: Part,
    ctx: &WriteCtx,
    record: bool,
) -> Result<Action, ApiError> {
    objects::fold_string_data(info, &mut new)?;
    secret::default_type(info, &mut new);
    objects::default_core(info, &mut new);
    if is_crd(info) && part == Part::Main {
        let name = meta_str(cur, "name").unwrap_or("");
        let causes = objects::validate_crd(&new, name);
        if !causes.is_empty() {
            return Err(ApiError::invalid(&info.rref(), name, causes));
        }
    }
    let sent_managed = if record {
        objects::sent_managed_fields(cur, &new)
    } else {
        None
    };
    let mut new = objects::finish_update(info, version, cur, new, part, ctx.strict)?;
    if new.is_none()
        && let Some(mf) = sent_managed
    {
        // Only the managed fields change (kubectl moving a client-side apply's fields to
        // its server-side manager): kube-apiserver stores them.
        let mut kept = (**cur).clone();
        meta_mut(&mut kept).insert("managedFields".into(), mf);
        new = Some(kept);
    }
    // What would be stored is checked, so a status write is judged by the metadata it keeps.
    if let Some(v) = &new {
        let mut causes = objects::validate_meta(v);
        causes.extend(secret::validate_update(info, cur, v));
        causes.extend(event::validate_update(info, version, cur, v));
        if !causes.is_empty() {
            let name = meta_str(cur, "name").unwrap_or("");
            return Err(ApiError::invalid(&info.rref(), name, causes));
        }
    }
    match new {
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

pub(super) fn after_write(app: &App, info: &ResourceInfo, outcome: &Outcome) {
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

/// apimachinery's `ValidatePatchOptions`: an apply names its field manager, and only an
/// apply may force.
fn patch_options_causes(pt: PatchType, q: &HashMap<String, String>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if pt == PatchType::Apply {
        if q.get("fieldManager").is_none_or(|m| m.is_empty()) {
            causes.push(Cause::new(
                "FieldValueRequired",
                "fieldManager",
                "Required value: is required for apply patch",
            ));
        }
    } else if q.contains_key("force") {
        causes.push(Cause::new(
            "FieldValueForbidden",
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    causes
}

/// A patch request's type and document, checked as kube-apiserver checks them before reading
/// the object: a known content type, the patch options, a body that decodes (an applied
/// configuration an object).
pub(super) fn patch_document(
    t: &Target,
    ct: &str,
    body: &[u8],
    q: &HashMap<String, String>,
) -> Result<(PatchType, Value), ApiError> {
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
    // The options are checked before the body is decoded, as kube-apiserver does.
    let causes = patch_options_causes(pt, q);
    if !causes.is_empty() {
        let options = ResRef {
            group: "meta.k8s.io",
            plural: "patchoptions",
            kind: "PatchOptions",
        };
        return Err(ApiError::invalid(&options, "", causes));
    }
    let patch_doc: Value = match pt {
        PatchType::Apply => mco_apimachinery::yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
        // kube-apiserver checks only that the body is JSON, and says no more.
        _ => {
            serde_json::from_slice(body).map_err(|_| ApiError::bad_request("invalid JSON patch"))?
        }
    };
    if pt == PatchType::Apply && !patch_doc.is_object() {
        return Err(ApiError::bad_request(
            "the applied configuration must be an object",
        ));
    }
    Ok((pt, patch_doc))
}

pub(super) async fn patch(
    app: &App,
    t: &Target,
    ct: &str,
    body: &[u8],
    q: &HashMap<String, String>,
    m: &Modify,
) -> Result<(u16, Arc<Value>), ApiError> {
    let name = &m.name;
    let (pt, patch_doc) = patch_document(t, ct, body, q)?;
    if pt == PatchType::Apply {
        m.check_name(&patch_doc)?;
    }
    let keys = machinery::merge_keys_or_metadata(&t.info, &t.version);
    // An apply may create: check what create would check before queueing.
    let creating =
        pt == PatchType::Apply && app.store.get(&t.info.gr(), t.ns_str(), name).is_none();
    if creating {
        if let Some(c) = objects::validate_name(&t.info, name) {
            return Err(ApiError::invalid(&t.info.rref(), name, vec![c]));
        }
        ensure_namespace(&app.store, &t.info, t.ns_str())?;
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
                objects::created_generation(info, version, &mut obj)?;
                let causes = objects::validate_meta(&obj);
                if !causes.is_empty() {
                    return Err(ApiError::invalid(&info.rref(), n2, causes));
                }
                admit_new(info, version, &mut obj, n2, c2.strict)?;
                return Ok(Action::Put(obj));
            };
            let base = typed(info, version, (**cur).clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn info_of(group: &str, plural: &str, namespaced: bool) -> ResourceInfo {
        let mut info = crate::registry::Registry::default()
            .all()
            .into_iter()
            .find(|r| r.plural == "configmaps")
            .unwrap();
        info.group = group.into();
        info.plural = plural.into();
        info.namespaced = namespaced;
        info
    }

    #[test]
    fn storage_keys_are_kube_apiservers() {
        let cm = info_of("", "configmaps", true);
        assert_eq!(
            storage_key(&cm, Some("diff"), "a"),
            "/registry/configmaps/diff/a"
        );
        let nodes = info_of("", "nodes", false);
        assert_eq!(storage_key(&nodes, None, "n"), "/registry/minions/n");
        let pdb = info_of("policy", "poddisruptionbudgets", true);
        assert_eq!(
            storage_key(&pdb, Some("ns"), "web"),
            "/registry/poddisruptionbudgets/ns/web"
        );
        let crds = info_of("apiextensions.k8s.io", "customresourcedefinitions", false);
        assert_eq!(
            storage_key(&crds, Some("ignored"), "x.example.com"),
            "/registry/apiextensions.k8s.io/customresourcedefinitions/x.example.com"
        );
    }

    #[test]
    fn a_uid_in_the_body_is_a_precondition() {
        let cm = info_of("", "configmaps", true);
        let cur = Arc::new(json!({"metadata": {"name": "a", "uid": "u1"}}));
        let body = |uid: &str| json!({"metadata": {"name": "a", "uid": uid}});
        // No uid, or the stored one: no precondition fails.
        check_uid(&cm, Some("d"), "a", &json!({"metadata": {}}), Some(&cur)).unwrap();
        check_uid(&cm, Some("d"), "a", &body(""), Some(&cur)).unwrap();
        check_uid(&cm, Some("d"), "a", &body("u1"), Some(&cur)).unwrap();
        let e = check_uid(&cm, Some("d"), "a", &body("u2"), Some(&cur)).unwrap_err();
        let v = e.to_status();
        assert_eq!(v["code"], 409);
        assert_eq!(v["reason"], "Conflict");
        assert_eq!(
            v["message"],
            "Operation cannot be fulfilled on configmaps \"a\": StorageError: invalid object, Code: 4, Key: /registry/configmaps/d/a, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: u2, UID in object meta: u1"
        );
        // A missing object is the empty one kube would create on update.
        let e = check_uid(&cm, Some("d"), "a", &body("u2"), None).unwrap_err();
        let v = e.to_status();
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .ends_with("UID in precondition: u2, UID in object meta: "),
            "{v}"
        );
    }

    #[test]
    fn apply_without_field_manager_is_invalid_patch_options() {
        let causes = patch_options_causes(PatchType::Apply, &query(&[("fieldManager", "")]));
        let options = ResRef {
            group: "meta.k8s.io",
            plural: "patchoptions",
            kind: "PatchOptions",
        };
        let status = ApiError::invalid(&options, "", causes).to_status();
        assert_eq!(
            status,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "code": 422, "reason": "Invalid",
                "message": "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                "details": {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                    {"reason": "FieldValueRequired", "field": "fieldManager", "message": "Required value: is required for apply patch"}
                ]}
            })
        );
        assert!(
            patch_options_causes(PatchType::Apply, &query(&[("fieldManager", "m")])).is_empty()
        );
    }

    #[test]
    fn only_an_apply_may_force() {
        let forced = query(&[("force", "true")]);
        let causes = patch_options_causes(PatchType::Merge, &forced);
        assert_eq!(
            causes,
            vec![Cause::new(
                "FieldValueForbidden",
                "force",
                "Forbidden: may not be specified for non-apply patch"
            )]
        );
        assert!(patch_options_causes(PatchType::Merge, &query(&[])).is_empty());
        let apply = query(&[("fieldManager", "m"), ("force", "true")]);
        assert!(patch_options_causes(PatchType::Apply, &apply).is_empty());
    }
}
