//! OpenAPI v3 documents as kube-apiserver publishes them under `/openapi/v3`.
//!
//! kubectl 1.29+ downloads the root and the document of the group-version it
//! writes to before `apply` (default `--validate=strict`): if a `patch`
//! operation for the kind carries the `fieldValidation` query parameter and the
//! `x-kubernetes-group-version-kind` extension, kubectl leaves validation to the
//! server; without it `apply` fails. Documents therefore contain every
//! operation of each resource with those markers, the CRD schemas (so
//! `kubectl explain` has something to show), and no strategic-merge-patch
//! content type, which would make kubectl build patches from incomplete
//! schemas.
//!
//! The `?hash=` in the root changes whenever a document changes (SHA-512 of its
//! JSON, upper-case hex, as upstream), so HTTP caches can treat each URL as
//! immutable.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";

/// One resource (one kind in one group-version) to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenApiResource {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The resource name in URLs (`machineconfigs`).
    pub plural: String,
    pub namespaced: bool,
    /// The object schema (`openAPIV3Schema` for CRDs). Without one, a minimal
    /// schema that accepts any fields is published.
    pub schema: Option<Value>,
    /// Whether `/status` is served.
    pub status_subresource: bool,
    /// True for custom resources: they get CRD-style schema names.
    pub custom: bool,
}

impl OpenApiResource {
    /// A built-in resource without a detailed schema.
    pub fn builtin(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        status_subresource: bool,
    ) -> Self {
        OpenApiResource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
            schema: None,
            status_subresource,
            custom: false,
        }
    }

    /// One resource per served version of a CustomResourceDefinition object.
    pub fn from_crd(crd: &Value) -> Vec<OpenApiResource> {
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or("");
        let kind = spec
            .pointer("/names/kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        let plural = spec
            .pointer("/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespaced = spec["scope"].as_str() == Some("Namespaced");
        spec["versions"]
            .as_array()
            .map(|versions| {
                versions
                    .iter()
                    .filter(|v| v["served"].as_bool() != Some(false))
                    .filter_map(|v| {
                        Some(OpenApiResource {
                            group: group.into(),
                            version: v["name"].as_str()?.into(),
                            kind: kind.into(),
                            plural: plural.into(),
                            namespaced,
                            schema: v
                                .pointer("/schema/openAPIV3Schema")
                                .or_else(|| spec.pointer("/validation/openAPIV3Schema"))
                                .cloned(),
                            status_subresource: v.pointer("/subresources/status").is_some()
                                || spec.pointer("/subresources/status").is_some(),
                            custom: true,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The built-in resources the embedded server serves.
pub fn builtin_resources() -> Vec<OpenApiResource> {
    let b = OpenApiResource::builtin;
    vec![
        b("", "v1", "Namespace", "namespaces", false, true),
        b("", "v1", "Node", "nodes", false, true),
        b("", "v1", "Pod", "pods", true, true),
        b("", "v1", "Event", "events", true, false),
        b("", "v1", "ConfigMap", "configmaps", true, false),
        b("", "v1", "Secret", "secrets", true, false),
        b("", "v1", "ServiceAccount", "serviceaccounts", true, false),
        b("events.k8s.io", "v1", "Event", "events", true, false),
        b("coordination.k8s.io", "v1", "Lease", "leases", true, false),
        b(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
        ),
        b("apps", "v1", "DaemonSet", "daemonsets", true, true),
        b("apps", "v1", "Deployment", "deployments", true, true),
        b("apps", "v1", "ReplicaSet", "replicasets", true, true),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            false,
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            false,
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            false,
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            false,
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            false,
            true,
        ),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            false,
            false,
        ),
        b(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
        ),
    ]
}

/// The key of a group-version in the root document: `api/v1` or `apis/<g>/<v>`.
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The `?hash=` of a document: upper-case hex SHA-512 of its JSON.
pub fn document_hash(doc: &Value) -> String {
    hash_of(&serde_json::to_vec(doc).unwrap_or_default())
}

fn hash_of(json: &[u8]) -> String {
    hex::encode_upper(Sha512::digest(json))
}

/// One group-version's document: as a tree, as the JSON served, and its hash.
#[derive(Debug, Clone)]
struct Built {
    doc: Value,
    json: Vec<u8>,
    hash: String,
}

/// Every `/openapi/v3` document of a server, built once per change of the set
/// of resources.
#[derive(Debug, Clone, Default)]
pub struct OpenApiV3 {
    docs: BTreeMap<String, Built>,
}

impl OpenApiV3 {
    /// Groups `resources` by group-version and builds one document for each.
    pub fn build(resources: &[OpenApiResource]) -> Self {
        let mut by_gv: BTreeMap<String, Vec<&OpenApiResource>> = BTreeMap::new();
        for r in resources {
            by_gv
                .entry(gv_path(&r.group, &r.version))
                .or_default()
                .push(r);
        }
        let docs = by_gv
            .into_iter()
            .map(|(key, rs)| {
                let doc = group_version_document(&rs);
                let json = serde_json::to_vec(&doc).unwrap_or_default();
                let hash = hash_of(&json);
                (key, Built { doc, json, hash })
            })
            .collect();
        OpenApiV3 { docs }
    }

    /// `GET /openapi/v3`.
    pub fn root(&self) -> Value {
        let paths: Map<String, Value> = self
            .docs
            .iter()
            .map(|(key, Built { hash, .. })| {
                (
                    key.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
                )
            })
            .collect();
        json!({ "paths": paths })
    }

    /// `GET /openapi/v3/<key>` where `key` is `api/v1` or `apis/<g>/<v>`.
    pub fn document(&self, key: &str) -> Option<&Value> {
        self.docs.get(key.trim_matches('/')).map(|b| &b.doc)
    }

    /// [`OpenApiV3::document`] as the JSON served, encoded once when built: a group's
    /// document is hundreds of kilobytes, read by every client that learns a schema.
    pub fn document_json(&self, key: &str) -> Option<&[u8]> {
        self.docs
            .get(key.trim_matches('/'))
            .map(|b| b.json.as_slice())
    }

    /// The current hash of a document, for `ETag` and cache headers.
    pub fn hash(&self, key: &str) -> Option<&str> {
        self.docs
            .get(key.trim_matches('/'))
            .map(|b| b.hash.as_str())
    }

    /// The group-version keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.docs.keys().map(String::as_str)
    }
}

/// The document of one group-version; all `resources` must share it.
pub fn group_version_document(resources: &[&OpenApiResource]) -> Value {
    let mut sorted: Vec<&OpenApiResource> = resources.to_vec();
    sorted.sort_by(|a, b| a.plural.cmp(&b.plural));

    let mut paths = Map::new();
    let mut schemas = Map::new();
    schemas.insert(OBJECT_META.into(), object_meta_schema());
    schemas.insert(LIST_META.into(), list_meta_schema());
    schemas.insert(STATUS.into(), status_schema());
    for r in sorted {
        add_resource(r, &mut paths, &mut schemas);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// `machineconfiguration.openshift.io` becomes `MachineconfigurationOpenshiftIo`,
/// `rbac.authorization.k8s.io` becomes `RbacAuthorization`, core becomes `Core`.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group
        .trim_end_matches(".k8s.io")
        .split(['.', '-'])
        .map(capitalize)
        .collect()
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The `components.schemas` name of a kind.
fn schema_name(r: &OpenApiResource, kind: &str) -> String {
    if r.custom {
        let reversed: Vec<&str> = r.group.split('.').rev().collect();
        format!("{}.{}.{kind}", reversed.join("."), r.version)
    } else if r.group == "apiextensions.k8s.io" {
        format!(
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{}.{kind}",
            r.version
        )
    } else {
        let short = if r.group.is_empty() {
            "core"
        } else {
            r.group.split('.').next().unwrap_or(&r.group)
        };
        format!("io.k8s.api.{short}.{}.{kind}", r.version)
    }
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn gvk(r: &OpenApiResource) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind})
}

fn query_param(name: &str, type_: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": type_, "uniqueItems": true}
    })
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": {"type": "string", "uniqueItems": true}
    })
}

fn dry_run() -> Value {
    query_param(
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
    )
}

fn field_manager() -> Value {
    query_param(
        "fieldManager",
        "string",
        "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
    )
}

fn field_validation() -> Value {
    query_param(
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
    )
}

fn force() -> Value {
    query_param(
        "force",
        "boolean",
        "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
    )
}

fn list_params() -> Vec<Value> {
    vec![
        query_param(
            "allowWatchBookmarks",
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
        ),
        query_param(
            "continue",
            "string",
            "The continue option should be set when retrieving more results from the server.",
        ),
        query_param(
            "fieldSelector",
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        query_param(
            "labelSelector",
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        query_param(
            "limit",
            "integer",
            "limit is a maximum number of responses to return for a list call.",
        ),
        query_param(
            "resourceVersion",
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from.",
        ),
        query_param(
            "resourceVersionMatch",
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls.",
        ),
        query_param(
            "sendInitialEvents",
            "boolean",
            "`sendInitialEvents=true` may be set together with `watch=true`.",
        ),
        query_param(
            "timeoutSeconds",
            "integer",
            "Timeout for the list/watch call.",
        ),
        query_param(
            "watch",
            "boolean",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
        ),
    ]
}

fn json_content(schema: Value) -> Value {
    json!({
        "application/json": {"schema": schema.clone()},
        "application/yaml": {"schema": schema},
    })
}

fn ok_response(schema_name: &str, codes: &[(&str, &str)]) -> Value {
    let mut responses = Map::new();
    for (code, description) in codes {
        responses.insert(
            (*code).into(),
            json!({"description": description, "content": json_content(schema_ref(schema_name))}),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(responses)
}

struct OpContext<'a> {
    r: &'a OpenApiResource,
    tag: String,
    id_prefix: String,
    kind_name: String,
    list_name: String,
}

impl OpContext<'_> {
    fn op(
        &self,
        action: &str,
        id: String,
        description: String,
        params: Vec<Value>,
        responses: Value,
    ) -> Value {
        json!({
            "tags": [self.tag],
            "description": description,
            "operationId": id,
            "parameters": params,
            "responses": responses,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(self.r),
        })
    }

    fn with_body(mut op: Value, content: Value) -> Value {
        op["requestBody"] = json!({"content": content, "required": true});
        op
    }

    /// `verb` + group + version + (`Namespaced`) + kind + suffix, as upstream
    /// names operations.
    fn id(&self, verb: &str, suffix: &str) -> String {
        format!("{verb}{}{}{suffix}", self.id_prefix, self.r.kind)
    }

    fn read(&self, suffix: &str, description: String) -> Value {
        self.op(
            "get",
            self.id("read", suffix),
            description,
            vec![],
            ok_response(&self.kind_name, &[("200", "OK")]),
        )
    }

    fn replace(&self, suffix: &str, description: String) -> Value {
        let op = self.op(
            "put",
            self.id("replace", suffix),
            description,
            vec![dry_run(), field_manager(), field_validation()],
            ok_response(&self.kind_name, &[("200", "OK"), ("201", "Created")]),
        );
        Self::with_body(op, json_content(schema_ref(&self.kind_name)))
    }

    fn patch(&self, suffix: &str, description: String) -> Value {
        let op = self.op(
            "patch",
            self.id("patch", suffix),
            description,
            vec![dry_run(), field_manager(), field_validation(), force()],
            ok_response(&self.kind_name, &[("200", "OK"), ("201", "Created")]),
        );
        // No strategic-merge-patch: kubectl would derive patches from these schemas.
        let body = json!({"type": "object"});
        Self::with_body(
            op,
            json!({
                "application/json-patch+json": {"schema": body.clone()},
                "application/merge-patch+json": {"schema": body.clone()},
                "application/apply-patch+yaml": {"schema": body},
            }),
        )
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

fn add_resource(
    r: &OpenApiResource,
    paths: &mut Map<String, Value>,
    schemas: &mut Map<String, Value>,
) {
    let group_part = group_camel(&r.group);
    let version_part = capitalize(&r.version);
    let ns_part = if r.namespaced { "Namespaced" } else { "" };
    let ctx = OpContext {
        r,
        tag: format!("{}_{}", lower_first(&group_part), r.version),
        id_prefix: format!("{group_part}{version_part}{ns_part}"),
        kind_name: schema_name(r, &r.kind),
        list_name: schema_name(r, &format!("{}List", r.kind)),
    };

    let prefix = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    let (collection, scope_params) = if r.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural),
            vec![path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            )],
        )
    } else {
        (format!("{prefix}/{}", r.plural), vec![])
    };
    let with_name = |mut params: Vec<Value>| {
        params.insert(0, path_param("name", &format!("name of the {}", r.kind)));
        Value::Array(params)
    };

    // Collection: list, create, delete collection.
    let list_op = ctx.op(
        "list",
        ctx.id("list", ""),
        format!("list or watch objects of kind {}", r.kind),
        list_params(),
        ok_response(&ctx.list_name, &[("200", "OK")]),
    );
    let create_op = OpContext::with_body(
        ctx.op(
            "post",
            ctx.id("create", ""),
            format!("create a {}", r.kind),
            vec![dry_run(), field_manager(), field_validation()],
            ok_response(
                &ctx.kind_name,
                &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
            ),
        ),
        json_content(schema_ref(&ctx.kind_name)),
    );
    let delete_collection_op = ctx.op(
        "deletecollection",
        format!(
            "delete{group_part}{version_part}Collection{ns_part}{}",
            r.kind
        ),
        format!("delete collection of {}", r.kind),
        list_params(),
        ok_response(STATUS, &[("200", "OK")]),
    );
    paths.insert(
        collection.clone(),
        json!({
            "parameters": scope_params,
            "get": list_op,
            "post": create_op,
            "delete": delete_collection_op,
        }),
    );

    // One object: read, replace, patch, delete.
    let delete_op = ctx.op(
        "delete",
        ctx.id("delete", ""),
        format!("delete a {}", r.kind),
        vec![dry_run()],
        ok_response(STATUS, &[("200", "OK"), ("202", "Accepted")]),
    );
    paths.insert(
        format!("{collection}/{{name}}"),
        json!({
            "parameters": with_name(scope_params.clone()),
            "get": ctx.read("", format!("read the specified {}", r.kind)),
            "put": ctx.replace("", format!("replace the specified {}", r.kind)),
            "patch": ctx.patch("", format!("partially update the specified {}", r.kind)),
            "delete": delete_op,
        }),
    );

    if r.status_subresource {
        paths.insert(
            format!("{collection}/{{name}}/status"),
            json!({
                "parameters": with_name(scope_params.clone()),
                "get": ctx.read("Status", format!("read status of the specified {}", r.kind)),
                "put": ctx.replace("Status", format!("replace status of the specified {}", r.kind)),
                "patch": ctx.patch(
                    "Status",
                    format!("partially update status of the specified {}", r.kind),
                ),
            }),
        );
    }

    if r.namespaced {
        let all_ns = format!("{prefix}/{}", r.plural);
        let list_all = ctx.op(
            "list",
            format!("list{group_part}{version_part}{}ForAllNamespaces", r.kind),
            format!("list or watch objects of kind {}", r.kind),
            list_params(),
            ok_response(&ctx.list_name, &[("200", "OK")]),
        );
        paths.insert(all_ns, json!({"get": list_all}));
    }

    schemas.insert(ctx.kind_name.clone(), object_schema(r));
    schemas.insert(ctx.list_name.clone(), list_schema(r, &ctx.kind_name));
}

fn type_meta_properties() -> (Value, Value) {
    (
        json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}),
        json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}),
    )
}

fn object_schema(r: &OpenApiResource) -> Value {
    let (api_version, kind) = type_meta_properties();
    let metadata = json!({
        "allOf": [schema_ref(OBJECT_META)],
        "default": {},
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
    });
    let mut schema = match &r.schema {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!({
            "type": "object",
            "description": format!("{} is served without a detailed schema.", r.kind),
            "x-kubernetes-preserve-unknown-fields": true
        }),
    };
    if schema.get("type").is_none() {
        schema["type"] = json!("object");
    }
    let props = schema
        .as_object_mut()
        .map(|m| m.entry("properties").or_insert_with(|| json!({})));
    if let Some(Value::Object(props)) = props {
        props.insert("apiVersion".into(), api_version);
        props.insert("kind".into(), kind);
        props.insert("metadata".into(), metadata);
    }
    schema["x-kubernetes-group-version-kind"] = json!([gvk(r)]);
    schema
}

fn list_schema(r: &OpenApiResource, item_name: &str) -> Value {
    let (api_version, kind) = type_meta_properties();
    json!({
        "type": "object",
        "description": format!("{}List is a list of {}", r.kind, r.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": api_version,
            "items": {"type": "array", "items": schema_ref(item_name)},
            "kind": kind,
            "metadata": {"allOf": [schema_ref(LIST_META)], "default": {}}
        },
        "x-kubernetes-group-version-kind": [{"group": r.group, "version": r.version, "kind": format!("{}List", r.kind)}]
    })
}

fn object_meta_schema() -> Value {
    let string_map =
        json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}});
    json!({
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "properties": {
            "annotations": string_map.clone(),
            "creationTimestamp": {"type": "string", "format": "date-time"},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "deletionTimestamp": {"type": "string", "format": "date-time"},
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set"},
            "generateName": {"type": "string"},
            "generation": {"type": "integer", "format": "int64"},
            "labels": string_map,
            "managedFields": {
                "type": "array",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "x-kubernetes-list-type": "atomic"
            },
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "ownerReferences": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["apiVersion", "kind", "name", "uid"],
                    "properties": {
                        "apiVersion": {"type": "string", "default": ""},
                        "blockOwnerDeletion": {"type": "boolean"},
                        "controller": {"type": "boolean"},
                        "kind": {"type": "string", "default": ""},
                        "name": {"type": "string", "default": ""},
                        "uid": {"type": "string", "default": ""}
                    },
                    "x-kubernetes-map-type": "atomic"
                },
                "x-kubernetes-list-map-keys": ["uid"],
                "x-kubernetes-list-type": "map"
            },
            "resourceVersion": {"type": "string"},
            "selfLink": {"type": "string"},
            "uid": {"type": "string"}
        }
    })
}

fn list_meta_schema() -> Value {
    json!({
        "type": "object",
        "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.",
        "properties": {
            "continue": {"type": "string"},
            "remainingItemCount": {"type": "integer", "format": "int64"},
            "resourceVersion": {"type": "string"},
            "selfLink": {"type": "string"}
        }
    })
}

fn status_schema() -> Value {
    let (api_version, kind) = type_meta_properties();
    json!({
        "type": "object",
        "description": "Status is a return value for calls that don't return other objects.",
        "properties": {
            "apiVersion": api_version,
            "code": {"type": "integer", "format": "int32"},
            "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "kind": kind,
            "message": {"type": "string"},
            "metadata": {"allOf": [schema_ref(LIST_META)], "default": {}},
            "reason": {"type": "string"},
            "status": {"type": "string"}
        },
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "Status", "version": "v1"}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream_conventions() {
        assert_eq!(group_camel(""), "Core");
        assert_eq!(
            group_camel("machineconfiguration.openshift.io"),
            "MachineconfigurationOpenshiftIo"
        );
        assert_eq!(
            group_camel("rbac.authorization.k8s.io"),
            "RbacAuthorization"
        );
        assert_eq!(group_camel("apps"), "Apps");
        let mc = OpenApiResource {
            custom: true,
            ..OpenApiResource::builtin(
                "machineconfiguration.openshift.io",
                "v1",
                "MachineConfig",
                "machineconfigs",
                false,
                false,
            )
        };
        assert_eq!(
            schema_name(&mc, "MachineConfig"),
            "io.openshift.machineconfiguration.v1.MachineConfig"
        );
        let cm = OpenApiResource::builtin("", "v1", "ConfigMap", "configmaps", true, false);
        assert_eq!(
            schema_name(&cm, "ConfigMap"),
            "io.k8s.api.core.v1.ConfigMap"
        );
        let lease =
            OpenApiResource::builtin("coordination.k8s.io", "v1", "Lease", "leases", true, false);
        assert_eq!(
            schema_name(&lease, "Lease"),
            "io.k8s.api.coordination.v1.Lease"
        );
        assert_eq!(gv_path("", "v1"), "api/v1");
        assert_eq!(gv_path("apps", "v1"), "apis/apps/v1");
    }
}
